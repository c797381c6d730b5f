"""Training on several ranks (rlvr.train.distributed): a 2-rank gloo run launched by torchrun equals a 1-rank
run of the same config, seed and global batch (episodes and weights); each rank holds half of the model and
writes only its own shards of a checkpoint, which resumes exactly on 2 ranks and on 1; bf16 mixed precision
computes in bf16 from float32 shards; LoRA with a KL penalty trains under DDP and FSDP2; bad distributed
settings are refused before any work.

Run as a script (`torchrun --nproc-per-node 2 tests/train/test_distributed.py CONFIG`) this file is one rank
of such a run: it registers the toy domain below, then runs `rlvr train CONFIG`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
import tomllib

from rlvr.config import RunConfig, load_config
from rlvr.errors import UserError
from rlvr.monitor.monitor import read_metrics
from rlvr.store.episodes import EpisodeStore
from rlvr.store.layout import RunLayout
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain, VerifierKind
from rlvr.tasks.source import ListSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.train import distributed
from rlvr.verify.verdict import Check, Verdict

TOY = "dist_toy"
FLAKY_RANK = "RLVR_TEST_FLAKY_RANK"
"""Environment variable: the rank on which the toy verifier fails the odd tasks as infra faults."""
ROOT = Path(__file__).resolve().parents[2]
WEIGHT_TOL = 5e-5
"""Largest |w_2rank - w_1rank| allowed after the run below: 12 optimizer steps (3 steps x 2 minibatches x 2
epochs) at lr 3e-3; measured here 1.2e-5, while the weights moved up to 3.4e-2. The two runs compute the same
update from the same samples and differ only in the order float32 gradients are summed (two ranks' partial
sums and FSDP2's reduce-scatter, against one accumulation): about 1e-7 relative. AdamW divides each gradient
by its running RMS, which turns that into a small share of lr per step, larger for weights whose gradient is
near zero. 5e-5 is 1/60 of one step's lr and 1/700 of how far the weights moved: a wrong normalisation or a
lost micro-batch (a whole step off) cannot pass; the losses and gradient norms are compared as well."""
LOGPROB_TOL = 1e-4
"""Largest difference of a behaviour log-prob: the weights agree to WEIGHT_TOL, tokens must agree exactly."""


class _ShareOfEven:
    """Toy verifier: the share of characters with an even code point, a graded reward a random model earns
    (so almost every group has variance and almost every step updates)."""

    def verify(self, task: Task, final: FinalState) -> Verdict:
        if os.environ.get(FLAKY_RANK, "-") == os.environ.get("RANK") and task.id[-1] in "13579":
            # the rank named by FLAKY_RANK stands for one whose loaded sandbox fleet timed out judging some
            # tasks: what it judges must never decide what the other ranks train on
            return Verdict.infra("verification timed out")
        text = final.answer or ""
        score = sum(ord(c) % 2 == 0 for c in text) / max(1, len(text))
        return Verdict.from_checks([Check(name="even", score=score, passed=score > 0.7)])


def _toy_source(cfg: object) -> ListSource:
    tasks = [Task(id=f"t{i}", domain=TOY, prompt=f"say vowels {i}", limits=TaskLimits(max_tokens=6),
                  answer="bdfhj"[: 1 + i % 5])  # even code points: gold passes
             for i in range(40)]
    return ListSource(tasks, name=TOY)


def register_toy() -> None:
    registry.names()  # load the built-ins first
    if not registry.is_registered(TOY):
        registry.register(Domain(TOY, _toy_source, verifiers={TOY: VerifierKind(lambda ctx: _ShareOfEven())}))


@pytest.fixture(scope="module", autouse=True)
def _toy_domain():
    register_toy()
    yield
    registry.unregister(TOY)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("dist-model"), n_layer=2, n_embd=32, n_head=2,
                            n_positions=256, seed=11)


def _data(out: Path, model: Path, **train: object) -> dict:
    return {
        "name": "eq", "output_dir": str(out), "seed": 5,
        "tasks": {"train": f"{TOY}:40", "heldout": f"{TOY}:4", "heldout_offset": 0},
        "sandbox": {"isolation": "none", "workers": 1},
        "policy": {"model": str(model), "max_new_tokens": 6, "device": "cpu"},
        "rollout": {"group_size": 4, "tool_workers": 1},
        # micro-batches of 3 split 16 samples unevenly over 2 ranks; 2 minibatches x 2 epochs reshuffle them;
        # the toy model's answers that run to the 6-token budget are trained on as they stand
        "train": {"steps": 3, "batch_size": 4, "lr": 3e-3, "checkpoint_every": 2, "heldout_samples": 2,
                  "micro_batch_size": 3, "minibatches": 2, "epochs": 2, "heldout_greedy": False,
                  "truncation": "score", **train},
        "sft": {"enabled": False},
        "monitor": {"tensorboard": False, "report": False},
    }


def _sft_file(tmp: Path) -> dict:
    """An SFT warm start for the equivalence runs: batches of 3 split unevenly over 2 ranks (2 + 1)."""
    data = tmp / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say vowels {i}",
                                        "completion": "aeiou"[: 1 + i % 5]}) + "\n"
                            for i in range(10)))
    return {"enabled": True, "source": str(data), "steps": 4, "batch_size": 3, "lr": 3e-3}


def _torchrun(config: Path, n: int = 2, *, launcher: tuple[str, ...] = (), module: bool = False,
              timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    target = ["-m", "rlvr", "train"] if module else [__file__]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
           *launcher,
           *target, str(config)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
                          check=False)


def _torchrun_summary(cfg: RunConfig, config: Path) -> dict:
    """Run `cfg` on 2 ranks under torchrun (it must succeed) and return its summary."""
    config.write_text(cfg.to_toml())
    done = _torchrun(config)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((cfg.run_dir / "summary.json").read_text())


def _episodes(run_dir: Path) -> dict[tuple[int, str, int], object]:
    return {(ep.step, ep.group_id, ep.sample_index): ep for ep in EpisodeStore(run_dir).episodes()}


def _weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run_dir / "model" / "model.safetensors")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> tuple[RunConfig, RunConfig]:
    """The same config, an SFT warm start then RL, trained by one process and by two gloo ranks launched with
    torchrun."""
    import warnings

    from rlvr import run

    tmp = tmp_path_factory.mktemp("dist-runs")
    sft = _sft_file(tmp)
    one = RunConfig.model_validate({**_data(tmp / "one", model_dir), "sft": sft})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run.train(one)
    config = tmp / "two.toml"
    config.write_text(tomli_w.dumps({**_data(tmp / "two", model_dir, world_size=2), "sft": sft}))
    done = _torchrun(config)
    assert done.returncode == 0, done.stderr[-3000:]
    return one, load_config(config)


@pytest.mark.timeout(400)
def test_two_ranks_equal_one_rank(runs: tuple[RunConfig, RunConfig], model_dir: Path) -> None:
    one, two = runs
    a, b = _episodes(one.run_dir), _episodes(two.run_dir)
    assert len(a) == 3 * 4 * 4 and a.keys() == b.keys()  # every episode stored exactly once
    for key, ep in a.items():
        other = b[key]
        assert ep.token_ids == other.token_ids and ep.loss_mask == other.loss_mask, key
        assert ep.reward == other.reward and ep.policy_version == other.policy_version, key
        assert max(abs(x - y) for x, y in zip(ep.logprobs, other.logprobs)) <= LOGPROB_TOL, key
    wa, wb = _weights(one.run_dir), _weights(two.run_dir)
    assert wa.keys() == wb.keys()
    start = _weights_of(model_dir)
    moved = max(float((wa[k] - start[k]).abs().max()) for k in wa if k in start)
    assert moved > 100 * WEIGHT_TOL  # the runs trained: equality is not that of an untouched model
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= WEIGHT_TOL, worst

    ma, mb = (read_metrics(RunLayout(c.run_dir).metrics) for c in (one, two))
    assert ma[0]["sft/steps"] == mb[0]["sft/steps"] == 4  # the warm start ran on both, before RL
    updates = 0
    # the loss is divided by the global token count: the same loss, not a rank's share
    for step in sorted(ma):
        for key in ("train/loss", "train/grad_norm", "train/samples", "reward/mean", "sft/final_loss"):
            if key in ma[step]:
                assert mb[step][key] == pytest.approx(ma[step][key], rel=1e-4, abs=1e-7), (step, key)
        updates += "train/loss" in ma[step]
    assert updates >= 2
    sa, sb = (json.loads((c.run_dir / "summary.json").read_text()) for c in (one, two))
    assert (sa["world_size"], sa["backend"]) == (1, "none")
    assert (sb["world_size"], sb["backend"], sb["sharding"]) == (2, "gloo", "fsdp")
    assert sa["pass1_after"] == pytest.approx(sb["pass1_after"], abs=1e-9)
    # FSDP2: each rank holds half of every parameter (dim 0 split, the odd row on rank 0)
    total = sb["model_params"]
    assert sum(sb["rank_params"]) == total and max(sb["rank_params"]) <= total / 2 + 1024
    assert sa["rank_params"] == [sa["model_params"]]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(400)
@pytest.mark.parametrize("source", ["reference", "gold"])
def test_two_ranks_equal_one_rank_for_the_domains_examples(tmp_path: Path, model_dir: Path,
                                                            source: str) -> None:
    """The warm start from the training domain's own examples, its reference answers (`source =
    "reference"`) or its gold trajectories played through the env (`"gold"`, the quickstart's), made by
    rank 0 and trained on by both: the weights one rank trains, to float noise, even where another rank would
    have judged the gold trajectories otherwise (a loaded sandbox's timeouts). (A file source: `runs` above;
    recovery samples: tests/train/test_recovery.py.)"""
    import warnings

    from rlvr import run

    sft = {"enabled": True, "source": source, "examples": 24, "steps": 6, "batch_size": 5, "lr": 3e-3}
    one = RunConfig.model_validate({**_data(tmp_path / "one", model_dir, steps=0), "sft": sft})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run.train(one)
    config = tmp_path / "two.toml"
    two = {**_data(tmp_path / "two", model_dir, steps=0, world_size=2), "sft": sft}
    config.write_text(tomli_w.dumps(two))
    done = _torchrun(config, env={FLAKY_RANK: "1"})  # rank 1 alone could not judge half the gold tasks
    assert done.returncode == 0, done.stderr[-3000:]
    wa, wb, start = _weights(one.run_dir), _weights(load_config(config).run_dir), _weights_of(model_dir)
    assert max(float((wa[k] - start[k]).abs().max()) for k in wa if k in start) > 100 * WEIGHT_TOL
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= WEIGHT_TOL
    ma, mb = (read_metrics(RunLayout(c.run_dir).metrics) for c in (one, load_config(config)))
    assert ma[0]["sft/examples"] == mb[0]["sft/examples"] >= 16  # the tasks not held out, up to 24
    assert mb[0]["sft/final_loss"] == pytest.approx(ma[0]["sft/final_loss"], rel=1e-4)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(400)
def test_bf16_under_fsdp2_computes_in_bf16_from_float32_shards(runs: tuple[RunConfig, RunConfig],
                                                               tmp_path: Path,
                                                              model_dir: Path) -> None:
    import math

    config = tmp_path / "bf16.toml"
    data = _data(tmp_path, model_dir, world_size=2, mixed_precision="bf16")
    # the warm start of the float32 runs
    config.write_text(tomli_w.dumps({**data, "sft": _sft_file(tmp_path)}))
    done = _torchrun(config, env={"RLVR_TEST_PROBE": str(tmp_path / "probe")})
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        probe = json.loads((tmp_path / "probe" / f"rank-{rank}.json").read_text())
        # gathered weights, activations
        assert probe["computed"] == ["torch.bfloat16 -> torch.bfloat16"], probe
        assert probe["params"] == probe["optimizer"] == ["DTensor torch.float32"], probe  # the shards stepped
        assert probe["local"] <= probe["total"] / 2 + 1024, probe
    fp32, bf16 = (read_metrics(RunLayout(c.run_dir).metrics) for c in (runs[1], load_config(config)))
    losses = [m["train/loss"] for m in bf16.values() if "train/loss" in m]
    assert len(losses) >= 2 and all(math.isfinite(x) for x in losses)
    # the first step trains on the same episodes (sampled from the float32 generation copy) as the float32
    # run:
    # bf16 rounding (3 significant digits) changes its figures a little, not what they are
    for key in ("train/loss", "train/grad_norm"):
        assert bf16[0][key] == pytest.approx(fp32[0][key], rel=2e-2), key
        assert bf16[0][key] != fp32[0][key], key  # and it did compute in another precision


LORA_KL = {"lora": True, "lora_rank": 4, "kl_coef": 0.1, "steps": 2}
"""LoRA with a KL penalty: the reference is the policy itself with its adapters switched off."""


@pytest.fixture(scope="module")
def lora_kl_one(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> RunConfig:
    """LORA_KL trained by one process."""
    import warnings

    from rlvr import run

    cfg = RunConfig.model_validate(_data(tmp_path_factory.mktemp("lora-kl"), model_dir, **LORA_KL))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run.train(cfg)
    return cfg


@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(400)
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_lora_with_a_kl_penalty_trains_on_two_ranks(lora_kl_one: RunConfig, tmp_path: Path, model_dir: Path,
                                                     sharding: str) -> None:
    config = tmp_path / "lora.toml"
    config.write_text(tomli_w.dumps(_data(tmp_path, model_dir, world_size=2, sharding=sharding, **LORA_KL)))
    done = _torchrun(config)
    assert done.returncode == 0, done.stderr[-3000:]
    one, two = (read_metrics(RunLayout(c.run_dir).metrics) for c in (lora_kl_one, load_config(config)))
    assert two[1]["train/kl"] > 0 and one[1]["train/kl"] > 0  # the adapters moved the policy off its base
    # the loss (penalty included) and gradient of each step as one process computes them, the second after an
    # update that the penalty's gradient took part in (train/kl itself is a mean of per-micro-batch means,
    # which differ with how the ranks split the micro-batches)
    for step in (0, 1):
        for key in ("train/loss", "train/grad_norm"):
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-4, abs=1e-7), (step, key)
    assert sorted(ep.step
                  for ep in EpisodeStore(load_config(config).run_dir).episodes()) == [0] * 16 + [1] * 16


def _moved(cfg: RunConfig, tmp_path: Path, **changes: object) -> RunConfig:
    """A copy of a finished run under tmp_path, its config changed as given (to resume it there)."""
    import shutil

    target = tmp_path / cfg.run_dir.parent.name
    shutil.copytree(cfg.run_dir, target / cfg.name)
    data = cfg.model_dump(mode="json", exclude_none=True)
    data["output_dir"] = str(target)
    data["train"].update(changes)
    data["train"] = {k: v for k, v in data["train"].items() if v is not None}
    moved = RunConfig.model_validate(data)
    moved.write(moved.run_dir)  # the saved config says where the run lives now
    return moved


def _elements_by_file(folder: Path) -> dict[str, int]:
    """Tensor elements each file of a sharded checkpoint holds, from its metadata."""
    import math

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    meta = FileSystemReader(str(folder)).read_metadata()
    out: dict[str, int] = {}
    for fqn, item in meta.state_dict_metadata.items():
        for chunk in item.chunks if isinstance(item, TensorStorageMetadata) else []:
            name = meta.storage_data[MetadataIndex(fqn, chunk.offsets)].relative_path
            out[name] = out.get(name, 0) + math.prod(chunk.sizes)
    return out


def test_each_rank_writes_only_its_own_shards(runs: tuple[RunConfig, RunConfig]) -> None:
    import torch

    two = runs[1]
    folder = two.run_dir / "checkpoints" / "step-000003.dcp"  # the last one: after 3 steps
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp", "run.pt"]
    assert not list(folder.parent.glob("*.pt"))  # no one-file checkpoint beside it
    elements = _elements_by_file(folder)
    total = sum(elements.values())
    params = json.loads((two.run_dir / "summary.json").read_text())["model_params"]
    assert total >= 3 * params  # the weights and AdamW's two moments, each element written once
    assert all(0.45 * total <= n <= 0.55 * total for n in elements.values()), elements  # half each
    sizes = {p.name: p.stat().st_size for p in folder.glob("*.distcp")}
    assert all(n <= 0.6 * sum(sizes.values()) for n in sizes.values()), sizes
    # rank 0's record: no weights, no optimizer state
    state = torch.load(folder / "run.pt", weights_only=False)
    assert "model" not in state and set(state["updater"]) == {"lr_schedule"} and state["optimizer_saved"]
    assert len(state["rng"]) == 2 and state["step"] == 3 and state["world_size"] == 2
    assert (folder.parent / "latest").read_text() == "3"


@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(400)
def test_a_sharded_checkpoint_resumes_exactly_on_two_ranks(runs: tuple[RunConfig, RunConfig],
                                                           tmp_path: Path) -> None:
    import torch

    two = runs[1]
    b = _moved(two, tmp_path / "b")  # the same run, from its checkpoint after 2 steps, on 2 ranks again
    (b.run_dir / "checkpoints" / "latest").write_text("2")
    summary = _torchrun_summary(b, tmp_path / "b.toml")
    assert summary["resumed_from_step"] == 2 and summary["world_size"] == 2
    ea, eb = _episodes(two.run_dir), _episodes(b.run_dir)
    assert ea.keys() == eb.keys() and {k[0] for k in eb} == {0, 1, 2}
    assert all(ea[k].token_ids == eb[k].token_ids and ea[k].logprobs == eb[k].logprobs for k in ea)  # exactly
    wa, wb = _weights(two.run_dir), _weights(b.run_dir)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.filterwarnings("ignore")
def test_a_two_rank_checkpoint_resumes_on_one_rank(runs: tuple[RunConfig, RunConfig], tmp_path: Path) -> None:
    from rlvr import run

    one, two = runs
    # both runs, one more step each, on one process: the 2-rank run resumes from its sharded checkpoint
    a = _moved(one, tmp_path / "a", steps=4)
    b = _moved(two, tmp_path / "b", steps=4, world_size=None)
    assert (b.run_dir / "checkpoints" / "step-000003.dcp" / ".metadata").is_file()
    sa, sb = run.train(a), run.train(b)
    assert sa["resumed_from_step"] == sb["resumed_from_step"] == 3 and sb["world_size"] == 1
    assert (b.run_dir / "checkpoints" / "step-000004.pt").is_file()  # one process writes the one-file form
    steps = sorted(ep.step for ep in EpisodeStore(b.run_dir).episodes())
    assert steps == sorted(list(range(4)) * 16)  # every step stored exactly once
    wa, wb = _weights(a.run_dir), _weights(b.run_dir)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= WEIGHT_TOL


@pytest.mark.distributed
@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(600)
def test_with_no_rl_steps_one_rank_and_two_ranks_both_checkpoint_step_0(tmp_path: Path,
                                                                        model_dir: Path) -> None:
    """`[train] steps = 0` (a warm start alone): both write the checkpoint after step 0, and nothing else,
    each in its own form (one file alone, shards on several ranks), so either resumes at any world size."""
    from rlvr import run
    from rlvr.train import checkpoint

    one = RunConfig.model_validate(_data(tmp_path / "one", model_dir, steps=0))
    run.train(one)
    two = RunConfig.model_validate(_data(tmp_path / "two", model_dir, steps=0, world_size=2))
    _torchrun_summary(two, tmp_path / "two.toml")
    for cfg, form in ((one, "step-000000.pt"), (two, "step-000000.dcp")):
        folder = cfg.run_dir / "checkpoints"
        assert checkpoint.latest_step(str(cfg.run_dir)) == 0, cfg.name
        assert sorted(p.name for p in folder.iterdir()) == ["latest", form], cfg.run_dir


@pytest.mark.distributed
@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(600)
def test_a_one_rank_checkpoint_resumes_on_two_ranks(tmp_path: Path, model_dir: Path) -> None:
    from rlvr import run

    one = RunConfig.model_validate(_data(tmp_path / "one", model_dir))
    run.train(one)
    a = _moved(one, tmp_path / "a", steps=4)  # one more step on one process ...
    run.train(a)
    b = _moved(one, tmp_path / "b", steps=4, world_size=2)  # ... and on two ranks, from the same checkpoint
    summary = _torchrun_summary(b, tmp_path / "b.toml")
    assert summary["resumed_from_step"] == 3 and summary["world_size"] == 2
    ea, eb = _episodes(a.run_dir), _episodes(b.run_dir)
    assert ea.keys() == eb.keys() and all(ea[k].token_ids == eb[k].token_ids for k in ea)
    wa, wb = _weights(a.run_dir), _weights(b.run_dir)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= WEIGHT_TOL


@pytest.mark.filterwarnings("ignore")
def test_export_of_a_two_rank_run_loads_in_transformers_and_eval(runs: tuple[RunConfig, RunConfig],
                                                                 tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.cli import main
    from rlvr.envs.messages import Message
    from rlvr.rollout.policies.backends import make_policy
    from rlvr.rollout.policy import SamplingParams

    two = runs[1]
    assert (two.run_dir / "checkpoints" / "step-000003.dcp").is_dir()  # read from the shards by one process
    assert main(["export", str(two.run_dir), "-o", str(tmp_path / "hf")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    final = _weights(two.run_dir)
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in final.items())  # the last checkpoint is the final model
    policy = make_policy(f"hf:{tmp_path / 'hf'}")  # what `rlvr eval --policy hf:DIR` loads
    out = policy.generate([[Message(role="user", content="hi")]],
                          SamplingParams(max_new_tokens=3, seeds=(1,)))
    assert out[0].token_ids
    assert main(["export", str(two.run_dir), "-o", str(tmp_path / "hf")]) == 2  # not over an export
    assert main(["export", str(two.run_dir), "-o", str(tmp_path / "ad"), "--adapter"]) == 2  # not a LoRA run
    assert not (tmp_path / "ad").exists()


def _weights_of(model: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(model / "model.safetensors")


@pytest.mark.filterwarnings("ignore")
def test_torchrun_module_refuses_a_world_size_that_cannot_split_the_groups(tmp_path: Path,
                                                                           model_dir: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(tomli_w.dumps(_data(tmp_path, model_dir, batch_size=3)))
    done = _torchrun(config, module=True, timeout=120)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    # every rank refuses and says so (whichever exits first, torchrun may stop the other before it prints)
    assert 1 <= len(lines) <= 2 and set(lines) == {SPLIT_REFUSAL}, done.stderr[-2000:]
    assert done.returncode != 0 and not (tmp_path / "eq").exists()  # refused before anything was written


SPLIT_REFUSAL = ("error: [train.batch_size]: batch_size 3 does not split into 2 equal shares of groups "
                 "(use a multiple of the world size 2)")


@pytest.mark.filterwarnings("ignore")
def test_the_refusal_survives_the_rank_that_exits_first(tmp_path: Path, model_dir: Path) -> None:
    """The race a user met: rank 1 refused and exited before rank 0 printed, and torchrun stopped rank 0 with
    SIGTERM, leaving no reason. Here rank 0 is held back on purpose until torchrun stops it: rank 1's own line
    must be there."""
    config = tmp_path / "bad.toml"
    config.write_text(tomli_w.dumps(_data(tmp_path, model_dir, batch_size=3)))
    # rank 0 waits 90 s before `rlvr train`
    done = _torchrun(config, timeout=120, env={"RLVR_TEST_HOLD": "0:90"})
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    # rank 1's: rank 0 was stopped before it got that far
    assert lines == [SPLIT_REFUSAL], done.stderr[-2000:]
    assert done.returncode != 0 and not (tmp_path / "eq").exists()


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_killed_rank_is_named_and_the_restarted_job_stores_every_step_once(tmp_path: Path,
                                                                              model_dir: Path) -> None:
    config = tmp_path / "faulty.toml"
    config.write_text(tomli_w.dumps(_data(tmp_path, model_dir, world_size=2, steps=4, checkpoint_every=1)))
    os.environ["RLVR_TEST_KILL"] = "1:2"  # rank 1 dies in step 2 (steps 0 and 1 are checkpointed)
    try:
        done = _torchrun(config, 2, launcher=("--max-restarts", "1"), timeout=500)
    finally:
        del os.environ["RLVR_TEST_KILL"]
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    # torchrun
    assert any("local_rank: 1" in ln and "exitcode: -9" in ln for ln in lines), done.stderr[-3000:]
    # the survivor: one line, no traceback
    lost = [ln for ln in lines if ln.startswith("error: rank 0 of 2:")]
    assert len(lost) == 1 and "another rank is gone" in lost[0], done.stderr[-3000:]
    assert not any("[rank0]: Traceback" in ln for ln in lines)
    cfg = load_config(config)
    summary = json.loads((cfg.run_dir / "summary.json").read_text())
    assert summary["resumed_from_step"] == 2 and summary["world_size"] == 2
    steps = sorted(ep.step for ep in EpisodeStore(cfg.run_dir).episodes())
    assert steps == sorted(list(range(4)) * 16)  # nothing lost, nothing stored twice across the restart


@pytest.mark.distributed
@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(600)
def test_the_ray_launcher_runs_the_ranks_as_actors(tmp_path: Path, model_dir: Path) -> None:
    import ray
    from ray import cloudpickle

    from rlvr import run

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the hook below travels by value
    data = _data(tmp_path, model_dir, world_size=2)
    data["cluster"] = {"address": "auto"}
    cfg = RunConfig.model_validate(data)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": register_toy})  # every rank knows the toy domain
    try:
        summary = run.train(cfg)
    finally:
        ray.shutdown()
    assert (summary["world_size"], summary["backend"], summary["sharding"]) == (2, "gloo", "fsdp")
    assert sum(summary["rank_params"]) == summary["model_params"]
    steps = sorted(ep.step for ep in EpisodeStore(cfg.run_dir).episodes())
    assert steps == sorted(list(range(3)) * 16)


# ------------------------------------------------------------------------------------- refusals in-process
def _cfg(tmp_path: Path, **train: object) -> RunConfig:
    return RunConfig.model_validate(_data(tmp_path, tmp_path, **train))


LAUNCHED = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
            "LOCAL_RANK": "0"}


@pytest.mark.parametrize(("env", "train", "field", "words"), [
    ({"RANK": "0", "WORLD_SIZE": "2"}, {}, "environment", "half set: RANK, WORLD_SIZE without MASTER_ADDR"),
    (LAUNCHED, {"world_size": 4}, "train.world_size", "world_size is 4 but the launcher started 2"),
    ({}, {"world_size": 2}, "train.world_size", "needs a launcher"),
    (LAUNCHED, {"batch_size": 5}, "train.batch_size", "does not split into 2"),
    (LAUNCHED, {"max_staleness": 1}, "train.max_staleness", "do not run on several ranks"),
    ({**LAUNCHED, "RANK": "2"}, {}, "environment", "RANK 2 is not below WORLD_SIZE 2"),
])
def test_bad_distributed_settings_are_refused(tmp_path: Path, env: dict, train: dict, field: str,
                                              words: str) -> None:
    with pytest.raises(UserError) as err:
        distributed.check(_cfg(tmp_path, **train), env)
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def test_nccl_without_cuda_is_refused(tmp_path: Path) -> None:
    # policy.device is "cpu" in these configs, so nccl has no GPU to use even where CUDA exists
    with pytest.raises(UserError, match=r"\[train.dist_backend\].*nccl backend needs CUDA"):
        distributed.check(_cfg(tmp_path, dist_backend="nccl"), {})


def test_single_process_and_launched_world_sizes(tmp_path: Path) -> None:
    assert distributed.check(_cfg(tmp_path), {}) == 1
    assert distributed.check(_cfg(tmp_path), LAUNCHED) == 2  # unset world_size: as launched
    assert distributed.check(_cfg(tmp_path, world_size=2), LAUNCHED) == 2
    assert distributed.backend_for(_cfg(tmp_path)) == "gloo"


def test_micro_batches_pair_up_across_ranks() -> None:
    chunk = list(range(7))
    shares = [distributed.Dist(rank=r, world_size=2).micro_batches(chunk, 3) for r in range(2)]
    assert [len(s) for s in shares] == [2, 2]  # rank 1's 3 samples fit one micro-batch: it runs a dummy too
    live = sorted(x for s in shares for micro, ok in s if ok for x in micro)
    assert live == chunk  # every sample once, on exactly one rank
    assert shares[1][1][1] is False
    assert distributed.SINGLE.micro_batches(chunk, 3) == [([0, 1, 2], True), ([3, 4, 5], True), ([6], True)]


def test_an_error_alone_is_not_called_a_lost_rank() -> None:
    with pytest.raises(RuntimeError, match="a bug"), distributed.SINGLE.collective("the update"):
        raise RuntimeError("a bug")


def test_share_is_contiguous_groups() -> None:
    assert [list(distributed.Dist(rank=r, world_size=2).share(6)) for r in range(2)] == [[0, 1, 2], [3, 4, 5]]


def _install_probe(out: Path) -> None:
    """Record in `out/rank-K.json` what the sharded policy's first block computes in during the update
    (weights and output of its MLP projection) and, at the end of the run, how this rank holds parameters and
    optimizer state."""
    from rlvr.train import loop

    computed: set[str] = set()
    real_shard, real_finish = distributed.shard, loop._finish

    def shard(model, dist, *args):
        model = real_shard(model, dist, *args)
        proj = distributed.transformer_blocks(model)[0].mlp.c_fc
        proj.register_forward_hook(lambda mod, a, y: computed.add(f"{mod.weight.dtype} -> {y.dtype}"))
        return model

    def finish(parts, summary):
        params = list(distributed.unwrapped(parts.policy.model).parameters())
        state = [v for st in parts.updater.optimizer.state.values() for v in st.values() if v.dim()]
        record = {"computed": sorted(computed),
                  "params": sorted({f"{type(p).__name__} {p.dtype}" for p in params}),
                  "optimizer": sorted({f"{type(v).__name__} {v.dtype}" for v in state}),
                  "local": sum(p.to_local().numel() for p in params), "total": sum(p.numel() for p in params)}
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank-{parts.dist.rank}.json").write_text(json.dumps(record))
        return real_finish(parts, summary)

    distributed.shard, loop._finish = shard, finish


if __name__ == "__main__":  # one rank of a torchrun job: the toy domain, then `rlvr train CONFIG`
    import torch

    torch.set_num_threads(1)
    register_toy()
    if os.environ.get("RLVR_TEST_PROBE"):  # a directory: each rank records the precision it trained in
        _install_probe(Path(os.environ["RLVR_TEST_PROBE"]))
    # "RANK:STEP": that rank SIGKILLs itself mid-step, first attempt only
    kill_at = os.environ.get("RLVR_TEST_KILL")
    if kill_at and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        import signal

        from rlvr.train import loop

        rank, step = (int(x) for x in kill_at.split(":"))
        real_update = loop.update_policy

        def dying_update(parts, episodes, at):  # after the rollout, before the update's collectives
            if at == step and parts.dist.rank == rank:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_update(parts, episodes, at)

        loop.update_policy = dying_update
    hold = os.environ.get("RLVR_TEST_HOLD")  # "RANK:SECONDS": that rank waits before it starts `rlvr train`
    if hold and os.environ.get("RANK") == hold.split(":")[0]:
        import time

        time.sleep(float(hold.split(":")[1]))
    tomllib.loads(Path(sys.argv[1]).read_text())  # a readable config, or fail here with the path
    from rlvr.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
