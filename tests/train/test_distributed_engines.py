"""Engines with several trainer ranks (rlvr.train.distributed.engines): `torchrun --nproc-per-node 2` with
`policy.engines = 1` on a local Ray (`vllm` marker, `make test-vllm`) trains what one rank trains with the
same engine and seed (episodes and weights), stores every step's episodes once, and leaves the engine holding
the trainer's final version, whose log-probs are those of the exported weights. Without vLLM (`make test`):
the refusals, what each rank opens and runs, and when rank 0 syncs.

Run as a script (`torchrun --nproc-per-node N tests/train/test_distributed_engines.py CONFIG`) this file is
one rank of such a run: the toy domain of tests/train/test_distributed.py (graded rewards a random model
earns, so the steps update), verified in the rank's own local sandbox pool rather than on Ray's pool workers
(which load only installed domains), a probe that records, at the end of the run, what each rank held and what
the engine samples, then `rlvr train CONFIG`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from tests.train.test_distributed import LAUNCHED, LOGPROB_TOL, ROOT, WEIGHT_TOL, _data, register_toy

from rlvr.config import RunConfig, load_config
from rlvr.errors import UserError
from rlvr.store.episodes import EpisodeStore
from rlvr.tasks.spec import Task, TaskLimits
from rlvr.train import distributed
from rlvr.train.distributed import Dist
from rlvr.train.distributed.engines import EngineSync, rank_config, with_engines
from rlvr.train.feed import EngineFeed, batch_repeats

ENGINE_TOL = 2e-4
"""Largest |engine log-prob - trainer log-prob| per token (float32 on CPU, as in
tests/rollout/fleet/test_vllm_fleet.py)."""
PROMPTS = ["say vowels 1", "say vowels 2"]
"""What the probe asks the engine to sample after the last update."""


def _engine_data(out: Path, model: Path, address: str, **train: object) -> dict:
    data = _data(out, model, steps=2, **train)
    data["policy"].update(backend="vllm", engines=1)
    data["cluster"] = {"address": address, "sandbox_cpus": 0}
    return data


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    # head size 32: the smallest the vLLM CPU attention kernels support
    return build_tiny_model(tmp_path_factory.mktemp("dist-eng-model"), n_layer=2, n_embd=64, n_head=2,
                            n_positions=256, seed=11)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama (vLLM's LoRA support covers Llama, not GPT-2) with rlvr's built-in tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.rollout.policies.builtin import build_tokenizer

    tok = build_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    torch.manual_seed(11)
    path = tmp_path_factory.mktemp("dist-eng-llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def local_ray():
    """A new local Ray of 2 CPUs and no GPU (never another process's cluster): its address for the ranks."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def _torchrun(config: Path, n: int, probe: Path, timeout: float = 800) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
           "RLVR_TEST_PROBE": str(probe)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
           __file__,
           str(config)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
                          check=False)


def _train(tmp: Path, name: str, model: Path, address: str, n: int,
           **train: object) -> tuple[RunConfig, dict[int, dict]]:
    """Train on `n` ranks under torchrun (it must succeed); the config and each rank's probe."""
    config = tmp / f"{name}.toml"
    config.write_text(tomli_w.dumps(_engine_data(tmp / name, model, address, world_size=n, **train)))
    done = _torchrun(config, n, tmp / f"{name}-probe")
    assert done.returncode == 0, done.stderr[-4000:]
    probes = {r: json.loads((tmp / f"{name}-probe" / f"rank-{r}.json").read_text()) for r in range(n)}
    return load_config(config), probes


KINDS = {"full": ("model_dir", {}), "lora": ("llama_dir", {"lora": True, "lora_rank": 4})}
"""Full fine-tuning of the tiny GPT-2, and LoRA on a tiny Llama (the engines load the adapters:
`engine_lora_rank` follows `train.lora_rank`)."""


@pytest.fixture(scope="module", params=list(KINDS))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, local_ray: str):
    """The same config trained on one rank and on two, each with one engine; and the model they started
    from."""
    tmp = tmp_path_factory.mktemp(f"dist-eng-{request.param}")
    fixture, train = KINDS[request.param]
    model = request.getfixturevalue(fixture)
    return (_train(tmp, "one", model, local_ray, 1, **train),
            _train(tmp, "two", model, local_ray, 2, **train),
            model)


def _trained(run_dir: Path, base: Path) -> tuple[dict, Any]:
    """A run's exported weights (the adapter's under LoRA) and the model they make."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = run_dir / "model"
    model = AutoModelForCausalLM.from_pretrained(base)
    if (out / "adapter_config.json").is_file():
        from peft import PeftModel

        return load_file(out / "adapter_model.safetensors"), PeftModel.from_pretrained(model, out).eval()
    return load_file(out / "model.safetensors"), AutoModelForCausalLM.from_pretrained(out).eval()


def _logprobs(model: Any, ids: list[int]) -> list[float]:
    import torch

    from rlvr.train.update import token_logprobs

    with torch.no_grad():
        t = torch.tensor([ids])
        return token_logprobs(model, t, torch.ones_like(t), 1.0)[0].tolist()


def _gap(model: Any, comps: list[dict]) -> float:
    """Largest |engine log-prob - model log-prob| over the sampled tokens."""
    out = 0.0
    for c in comps:
        ref = _logprobs(model, c["prompt"] + c["tokens"])[len(c["prompt"]):]
        out = max([out] + [abs(a - b) for a, b in zip(c["logprobs"], ref)])
    return out


@pytest.mark.vllm
@pytest.mark.timeout(1800)
def test_two_ranks_feed_one_engine_and_train_what_one_rank_trains(runs) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    (one, p1), (two, p2), model_dir = runs
    stored = {label: list(EpisodeStore(c.run_dir).episodes()) for label, c in (("one", one), ("two", two))}
    keys = {n: [(ep.step, ep.group_id, ep.sample_index) for ep in eps] for n, eps in stored.items()}
    assert len(keys["two"]) == len(set(keys["two"])) == 2 * 4 * 4  # every step's episodes stored once
    assert sorted(keys["one"]) == sorted(keys["two"])
    # synced per update
    assert sorted({(ep.step, ep.policy_version) for ep in stored["two"]}) == [(0, 0), (1, 1)]
    a = {(ep.step, ep.group_id, ep.sample_index): ep for ep in stored["one"]}
    # the same engine sampled the same tokens from the same (within float noise) weights
    for ep in stored["two"]:
        other = a[(ep.step, ep.group_id, ep.sample_index)]
        assert ep.token_ids == other.token_ids and ep.reward == other.reward
        assert max(abs(x - y) for x, y in zip(ep.logprobs, other.logprobs)) <= LOGPROB_TOL

    # rank 0 held the engine and fed it; rank 1 held a plain hf policy and never generated
    assert (p2[0]["policy"], p2[0]["engines"], p2[0]["syncer"]) == ("EnginesPolicy", 1, True)
    assert (p2[1]["policy"], p2[1]["engines"], p2[1]["generated"]) == ("HFPolicy", 0, 0)
    # one sync per update, each sending what a run alone sends
    assert len(p2[0]["sync_bytes"]) == 2 and p2[0]["sync_bytes"] == p1[0]["sync_bytes"]
    assert p2[0]["engine_version"] == p2[0]["version"] == 2 == p1[0]["engine_version"]

    (wa, _), (wb, trained) = (_trained(c.run_dir, model_dir) for c in (one, two))
    start = load_file(model_dir / "model.safetensors")
    assert wa.keys() == wb.keys()
    moved = max(float((w - start.get(k, torch.zeros_like(w))).abs().max())
                for k, w in wa.items() if "lora_A" not in k)
    assert moved > 100 * WEIGHT_TOL  # it trained (under LoRA: B, which starts at 0)
    if two.train.lora:  # the adapter alone went to the engine
        assert max(p2[0]["sync_bytes"]) < sum(t.numel() * t.element_size() for t in start.values()) / 4
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= WEIGHT_TOL

    untrained = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    comps = p2[0]["samples"]
    assert all(c["version"] == 2 and c["tokens"] for c in comps)
    new_gap, old_gap = _gap(trained, comps), _gap(untrained, comps)
    print(f"\n|engine - trained| {new_gap:.2e}, |engine - untrained| {old_gap:.2e}, "
          f"worst weight gap {max(float((wa[k] - wb[k]).abs().max()) for k in wa):.2e}")
    assert new_gap < ENGINE_TOL  # the engine holds the weights the ranks trained
    assert old_gap > 10 * ENGINE_TOL  # and not the ones it started with


# ------------------------------------------------------------------------------------------ without vLLM
def _cfg(tmp_path: Path, **train: object) -> RunConfig:
    return RunConfig.model_validate(_engine_data(tmp_path, tmp_path, "auto", **train))


def test_engines_train_on_several_ranks_and_what_cannot_is_refused(tmp_path: Path) -> None:
    assert distributed.check(_cfg(tmp_path), LAUNCHED) == 2
    data = _engine_data(tmp_path, tmp_path, "auto")
    data["policy"]["engines"] = 0
    for cfg, field, words in [
        (RunConfig.model_validate(data), "policy.engines",
         "in-process vllm engine does not run on several ranks"),
        (_cfg(tmp_path, max_staleness=1), "train.max_staleness", "do not run on several ranks"),
    ]:
        with pytest.raises(UserError) as err:
            distributed.check(cfg, LAUNCHED)
        assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def test_engines_with_ranks_started_by_ray_are_refused_before_any_actor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr import run

    def no_actors(*args: object, **kw: object) -> None:
        raise AssertionError("ranks were started")

    monkeypatch.setattr(distributed, "run_on_ray", no_actors)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UserError) as err:
        run.train(_cfg(tmp_path, world_size=2))
    assert (err.value.field == "policy.engines" and "started by Ray" in str(err.value)
            and "\n" not in str(err.value))


def test_only_rank_0_opens_the_engines(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    rank0, rank1 = Dist(rank=0, world_size=2), Dist(rank=1, world_size=2)
    assert with_engines(cfg, rank0) and with_engines(cfg, rank1) and not with_engines(cfg, distributed.SINGLE)
    assert rank_config(cfg, rank0) is cfg and rank_config(cfg, distributed.SINGLE) is cfg
    other = rank_config(cfg, rank1)
    assert (other.policy.backend, other.policy.engines, other.policy.model) == ("hf", 0, cfg.policy.model)
    assert other.train == cfg.train and other.cluster == cfg.cluster


class _Engine:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[int]]] = []
        from rlvr.rollout.core.rollouts import RolloutStats

        self.stats = RolloutStats(wall_s=1.0, idle_s=0.0, generate_s=0.5, generate_calls=1,
                                  generated_tokens=8,
                                  episodes=8)

    def run(self, tasks: list[Task], k: int, *, step: int, seed: int, repeats: list[int]) -> list[str]:
        self.calls.append(([t.id for t in tasks], repeats))
        return [f"{t.id}/{i}" for t in tasks for i in range(k)]


class _Trainer:
    def __init__(self, dist: Dist, cfg: RunConfig) -> None:
        self.dist, self.cfg, self.rollouts = dist, cfg, _Engine()


def test_rank_0_runs_every_group_and_the_others_none(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    batch = [Task(id=i, domain="x", prompt="p", limits=TaskLimits(max_tokens=4))
             for i in ("a", "b", "a", "c")]
    main, other = _Trainer(Dist(rank=0, world_size=2), cfg), _Trainer(Dist(rank=1, world_size=2), cfg)
    episodes, metrics = EngineFeed(main, lambda s: 100 + s).run(3, batch)
    assert main.rollouts.calls == [(["a", "b", "a", "c"],
                                    batch_repeats(batch))] and batch_repeats(batch)[2] == 1
    assert len(episodes) == 4 * cfg.rollout.group_size and metrics
    assert EngineFeed(other, lambda s: 100 + s).run(3, batch) == ([], {}) and other.rollouts.calls == []


class _Policy:
    """What EngineSync needs of an EnginesPolicy: `.model`, `.version`, `sync_weights`, `separate_weights`."""

    def __init__(self, model: Any) -> None:
        self.model, self.version, self.synced, self.separate = model, 0, [], False

    def separate_weights(self) -> None:
        self.separate = True

    def sync_weights(self, weights: Any = None, version: int | None = None) -> float:
        self.synced.append((self.model, weights, version))
        return 0.0


def test_rank_0_syncs_from_the_trained_model_once_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    passed: list[int] = []
    monkeypatch.setattr(Dist, "barrier", lambda self: passed.append(self.rank))  # no process group here
    inner = nn.Linear(2, 2)
    # a DDP wrapper without a process group
    wrapped = DistributedDataParallel.__new__(DistributedDataParallel)
    nn.Module.__init__(wrapped)
    wrapped.module = inner
    policies = {r: _Policy(inner) for r in (0, 1)}
    syncs = {r: EngineSync.before_sharding(policies[r], Dist(rank=r, world_size=2, sharding="ddp"))
             for r in (0, 1)}
    # rank 0's engines change only when it syncs them
    assert policies[0].separate and not policies[1].separate
    assert syncs[0].full is None  # DDP: every rank holds the whole model, nothing is copied or gathered
    for r in (0, 1):
        policies[r].model = wrapped
        assert syncs[r].sync(policies[r]) is None  # the engines hold version 0, the model files
        policies[r].version = 1
        assert syncs[r].sync(policies[r]) is not None and syncs[r].sync(policies[r]) is None
        assert policies[r].model is wrapped  # the trainer's model is back after the sync
    assert policies[0].synced == [(inner, None, 1)]  # the unwrapped trained model, as a run alone syncs
    assert policies[1].synced == [] and passed == [0, 1]


# -------------------------------------------------------------------------------------- one rank, as a script
def _install_probe(out: Path) -> None:
    """Record in `out/rank-K.json`, when the run finishes, what this rank held and (rank 0) what the engine
    samples then, with the version it reports."""
    from rlvr.rollout.policies.hf import HFPolicy
    from rlvr.rollout.policy import SamplingParams
    from rlvr.train import loop

    generated = [0]
    real_generate, real_finish = HFPolicy.generate, loop._finish

    def counting(self, conversations, *args, **kw):
        generated[0] += len(conversations)
        return real_generate(self, conversations, *args, **kw)

    def finish(parts, summary):
        from rlvr.envs.messages import Message

        policy = parts.policy
        record: dict[str, Any] = {"policy": type(policy).__name__, "syncer": parts.engines is not None,
                                  "version": policy.version, "generated": generated[0], "engines": 0}
        if hasattr(policy, "pool"):
            convs = [[Message(role="user", content=p)] for p in PROMPTS]
            comps = policy.generate(convs, SamplingParams(temperature=1.0, max_new_tokens=12, seeds=(1, 2)))
            record.update(engines=len(policy.pool.members), engine_version=policy.engine_version,
                          sync_bytes=policy.sync_bytes,
                          samples=[{"prompt": c.prompt_token_ids, "tokens": c.token_ids,
                                    "logprobs": c.logprobs,
                                    "version": c.policy_version} for c in comps])
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank-{parts.dist.rank}.json").write_text(json.dumps(record))
        return real_finish(parts, summary)

    HFPolicy.generate, loop._finish = counting, finish


if __name__ == "__main__":  # one rank of a torchrun job
    import torch

    torch.set_num_threads(1)
    register_toy()
    _install_probe(Path(os.environ["RLVR_TEST_PROBE"]))
    import rlvr.run
    from rlvr.sandbox import make_pool

    # each rank's sandboxes in-process, where the toy verifier is registered (Ray's pool workers know only the
    # installed domains); the engine is the Ray actor under test
    rlvr.run.open_pool = lambda sandbox, cluster: make_pool(sandbox)
    from rlvr.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
