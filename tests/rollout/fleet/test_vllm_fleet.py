"""Disaggregated generation (`policy.engines`, rlvr.rollout.fleet.engines): the refusals and the split of a
batch across engines run in `make test` (no vLLM; the weight-sync group's wire format is
test_weight_sync.py's); one vLLM engine as a Ray actor on a local Ray (`vllm` marker, `make test-vllm`) is
checked against the trainer's forward pass before and after a weight sync, against the in-process engine, and
through `rlvr train`."""
from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.config import PolicyConfig, TrainConfig, load_config
from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.rollout.fleet.engines import assign, group_key, shares
from rlvr.rollout.policies.backends import make_policy
from rlvr.rollout.policy import SamplingParams

TOL = 2e-4
"""Largest |engine log-prob - trainer log-prob| accepted per token (float32 on CPU, as for the in-process
engine)."""
MOVED = 20 * TOL
"""After one AdamW step at lr 5e-3, the old weights' log-probs of the new samples must be this far off
somewhere: otherwise the engine might still hold them."""


def engine(test):
    """Needs vLLM and Ray: `make test-vllm` (engine start-up is slow on a loaded machine)."""
    return pytest.mark.vllm(pytest.mark.timeout(900)(test))


def conv(text: str, system: str = "Answer.") -> list[Message]:
    return [Message(role="system", content=system), Message(role="user", content=text)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    # head size 32: the smallest the vLLM CPU attention kernels support
    return build_tiny_model(tmp_path_factory.mktemp("etiny"), n_layer=2, n_embd=64, n_head=2, n_positions=256,
                            seed=7)


@pytest.fixture(scope="module")
def local_ray():
    """A new local Ray of 3 CPUs and no GPU (never another process's cluster; reused if this session has one):
    `rlvr train` below needs one for its engine and one for its sandbox worker while the module's engine holds
    the third."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=3, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


# ------------------------------------------------------------------------------------ refusals (no vLLM)
RUN = '[policy]\nbackend = "vllm"\nmodel = "builtin:tiny"\n'


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[policy]\nbackend = "hf"\nengines = 2\n[cluster]\naddress = "auto"\n', "needs the vllm backend"),
        (RUN + "engines = 1\n", "no Ray address is set"),
        (RUN + 'engines = 1\nengine_tp = 2\ndevice = "cpu"\n[cluster]\naddress = "auto"\n', "needs CUDA"),
        (RUN + "engine_tp = 2\n", "policy.engine_tp"),
        (RUN + "engines = -1\n", "policy.engines"),
        (RUN + "engines = 2\nengines_min = 3\n[cluster]\naddress = \"auto\"\n",
         "engines_min = 3 is above engines = 2"),
        (RUN + "engines = 2\nengines_max = 1\n[cluster]\naddress = \"auto\"\n",
         "engines_max = 1 is below engines = 2"),
        (RUN + "engines_max = 2\n", "policy.engines_max"),
        (RUN + "engine_lora_rank = 16\n", "policy.engine_lora_rank"),
        (RUN + "engines = 1\nscale_up_wait_s = 0\n[cluster]\naddress = \"auto\"\n", "policy.scale_up_wait_s"),
    ],
)
def test_config_refusals(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(UserError) as info:
        load_config(p)
    msg = str(info.value)
    assert needle in msg and str(p) in msg and "[policy." in msg and "\n" not in msg


def test_engines_config_loads_with_a_ray_address(tmp_path: Path) -> None:
    p = tmp_path / "ok.toml"
    p.write_text(RUN + 'engines = 2\n[cluster]\naddress = "auto"\n')
    cfg = load_config(p)
    assert cfg.policy.engines == 2 and cfg.policy.engine_tp == 1
    assert load_config(p, ["policy.engines=0", 'cluster.address=""']).policy.engines == 0  # default behaviour


def test_train_refuses_engines_without_ray_in_one_line(cli, tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text(RUN + "engines = 1\n")
    res = cli(["train", str(p)])
    assert res.code == 2 and "no Ray address is set" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_without_ray_the_engines_are_a_user_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(UserError, match=r"rlvr\[ray\]"):
        make_policy(PolicyConfig(backend="vllm", model=str(tmp_path), engines=1))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"engines": 1, "engine_tp": 2}, "engine_tp = 2 needs CUDA GPUs"),
        ({"engines": 1, "device": "cuda"}, "has no GPUs"),
        ({"engines": 4096}, "4096 engines need 4096 CPUs"),
    ],
)
def test_what_the_cluster_cannot_place_is_refused_before_any_engine_starts(tmp_path, local_ray, kw,
                                                                           needle) -> None:
    """Refused by make_policy's EnginesPolicy against the cluster's resources, before the model is even read
    (no vLLM, no actor started)."""
    with pytest.raises(UserError, match=needle) as info:
        make_policy(PolicyConfig(backend="vllm", model=str(tmp_path / "never-read"), **kw))
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------- the split of a batch
def test_a_group_stays_on_one_engine_and_engines_share_the_load() -> None:
    convs = [conv(f"task {t}") for t in range(4) for _ in range(3)]  # 4 groups of 3 samples
    keys = [group_key(c, i) for i, c in enumerate(convs)]
    sticky: dict[str, int] = {}
    where = assign(keys, 2, sticky)
    assert all(len({where[i] for i in range(n, n + 3)}) == 1 for n in range(0, 12, 3))
    assert sorted(where.count(e) for e in (0, 1)) == [6, 6]
    later = [c + [Message(role="assistant", content="x"), Message(role="user", content="more")]
             for c in convs]
    # the next turn, same engine
    assert assign([group_key(c, i) for i, c in enumerate(later)], 2, sticky) == where
    assert group_key(conv("a", system="one"), 0) != group_key(conv("a", system="two"), 1)
    assert group_key([], 5) != group_key([], 6)


def test_each_engine_keeps_its_conversations_seeds_and_budgets() -> None:
    params = SamplingParams(max_new_tokens=9, seeds=(10, 11, 12, 13, 14), budgets=(1, 2, 3, 4, 5))
    parts = shares([1, 0, 1, 1, 0], params)
    assert [(e, idx) for e, idx, _ in parts] == [(0, [1, 4]), (1, [0, 2, 3])]
    assert parts[0][2].seeds == (11, 14) and parts[0][2].budgets == (2, 5)
    assert parts[1][2].seeds == (10, 12, 13) and parts[1][2].budgets == (1, 3, 4)
    assert parts[1][2].max_new_tokens == 9


# --------------------------------------------------------------------------------- one engine on Ray (vLLM)
def trainer_logprobs(model, ids: list[int], temperature: float = 1.0) -> list[float]:
    from rlvr.train.update import token_logprobs

    with torch.no_grad():
        t = torch.tensor([ids])
        return token_logprobs(model, t, torch.ones_like(t), temperature)[0].tolist()


def gaps(model, comps) -> float:
    """Largest |engine log-prob - model log-prob| over the generated tokens of `comps`."""
    out = 0.0
    for c in comps:
        ref = trainer_logprobs(model, c.prompt_token_ids + c.token_ids)[len(c.prompt_token_ids):]
        out = max([out] + [abs(a - b) for a, b in zip(c.logprobs, ref)])
    return out


@pytest.fixture(scope="module")
def engines(model_dir, local_ray):
    from rlvr.rollout.fleet.engines import EnginesPolicy

    pol = EnginesPolicy(model_dir, engines=1, device="cpu")
    yield pol
    pol.close()


CONVS = [conv("What is 6 * 7?"), conv("What is 6 * 7?"), conv("Name a prime."), conv("x" * 100)]
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=16, seeds=(1, 2, 3, 4))


@engine
def test_the_engine_actor_returns_what_the_in_process_engine_returns(engines, model_dir) -> None:
    from rlvr.rollout.policies.vllm import VLLMPolicy

    engines.sync_weights()  # whatever other tests did: the engine holds the trainer's weights
    with VLLMPolicy(model_dir, device="cpu") as inproc:
        inproc.sync_weights(engines.model)
        want = inproc.generate(CONVS, PARAMS)
    have = engines.generate(CONVS, PARAMS)
    assert info_is_cpu(engines.info)
    for a, b in zip(have, want):
        assert a.prompt_token_ids == b.prompt_token_ids and a.token_ids == b.token_ids and a.text == b.text
        assert a.finish_reason == b.finish_reason and a.logprobs == pytest.approx(b.logprobs, abs=TOL)
        assert a.policy_version == engines.engine_version
    assert gaps(engines.model, have) < TOL


def info_is_cpu(info: list[dict]) -> bool:
    return len(info) == 1 and info[0]["gpus"] == [] and info[0]["node"]


@engine
def test_an_update_reaches_the_engine_over_the_group(engines) -> None:
    """Sample, one AdamW step on the engine's own tokens and log-probs, sync: the engine's log-probs then
    follow the new weights, not the old ones, and the versions advance."""
    from rlvr.rollout.policies.weights import trainer_weights
    from rlvr.train.update import PolicyUpdater, Sample

    before = engines.generate(CONVS, PARAMS)
    v0 = engines.engine_version
    assert v0 == engines.version and all(c.policy_version == v0 for c in before)
    assert gaps(engines.model, before) < TOL
    old = copy.deepcopy(engines.model)
    samples = [Sample(c.prompt_token_ids + c.token_ids,
                      [0] * len(c.prompt_token_ids) + [1] * len(c.token_ids),
                      [0.0] * len(c.prompt_token_ids) + c.logprobs, 1.0 if i % 2 else -1.0)
               for i, c in enumerate(before)]
    PolicyUpdater(engines.model, TrainConfig(lr=5e-3), pad_id=engines.pad_id, temperature=1.0).step(samples,
                                                                                                    seed=0)
    engines.version += 1
    seconds = engines.sync_weights()
    assert engines.engine_version == engines.version == v0 + 1
    assert seconds > 0 and engines.sync_seconds[-1] == seconds and engines.engine_sync_seconds[-1] <= seconds
    weights = trainer_weights(engines.model)
    # the tiny GPT-2 ties its output head to the embeddings
    unique = {t.data_ptr(): t for _, t in weights}.values()
    assert engines.sync_bytes[-1] == sum(t.numel() * t.element_size() for t in unique) < sum(
        t.numel() * t.element_size() for _, t in weights)
    after = engines.generate(CONVS, PARAMS)
    assert all(c.policy_version == v0 + 1 for c in after)
    new_gap, old_gap = gaps(engines.model, after), gaps(old, after)
    print(f"\nsync {seconds * 1e3:.1f} ms (engine side {engines.engine_sync_seconds[-1] * 1e3:.1f} ms), "
          f"{engines.sync_bytes[-1]} bytes; |engine - new| {new_gap:.2e}, |engine - old| {old_gap:.2e}")
    assert new_gap < TOL
    assert old_gap > MOVED


@engine
def test_asynchronous_mode_keeps_the_engine_version_until_the_trainer_syncs(engines) -> None:
    from rlvr.rollout.policies.weights import snapshot

    engines.sync_weights()
    held = engines.engine_version
    engines.separate_weights()
    try:
        with torch.no_grad():
            for p in engines.model.parameters():
                p.mul_(1.1)
        engines.version += 1  # the trainer moved on; the engine must not follow by itself
        stale = engines.generate(CONVS[:2], SamplingParams(max_new_tokens=8, seeds=(5, 6)))
        assert engines.generation_version == held and all(c.policy_version == held for c in stale)
        engines.sync_weights(snapshot(engines.model), version=engines.version)  # what AheadFeed does
        fresh = engines.generate(CONVS[:2], SamplingParams(max_new_tokens=8, seeds=(5, 6)))
        assert all(c.policy_version == engines.version for c in fresh) and gaps(engines.model, fresh) < TOL
    finally:
        engines.auto_sync = True


def _train_toml(tmp_path: Path, model_dir: Path) -> Path:
    from tests.rollout.policies.test_vllm import _train_toml as vllm_run

    return vllm_run(tmp_path, model_dir, "engines-run", 2, extra_policy="engines = 1",
                    tail='[cluster]\naddress = "auto"\n')


@engine
def test_rlvr_train_with_an_engine_actor(cli, model_dir, local_ray, tmp_path, monkeypatch) -> None:
    """`rlvr train` with `policy.engines = 1` on the running Ray: one version per step, a sync per update, and
    the engine's CPU is given back when the run ends."""
    from rlvr.rollout.fleet.engines import EnginesPolicy
    from rlvr.rollout.policies.vllm import VLLMPolicy
    from rlvr.store.episodes import open_run

    def no_in_process_engine(*args, **kw):
        raise AssertionError("the run started an in-process engine")

    synced: list[list[int]] = []
    close = EnginesPolicy.close

    def record_and_close(self):
        synced.append(list(self.sync_bytes))
        close(self)

    # this process only: not the actor's
    monkeypatch.setattr(VLLMPolicy, "_start_engine", no_in_process_engine)
    monkeypatch.setattr(EnginesPolicy, "close", record_and_close)
    monkeypatch.chdir(tmp_path)
    free = local_ray.available_resources().get("CPU", 0)
    res = cli(["train", str(_train_toml(tmp_path, model_dir))])
    assert res.code == 0, res.stderr + res.stdout
    assert synced and len(synced[0]) >= 3 and len(set(synced[0])) == 1  # SFT, then one per update: same bytes
    run = tmp_path / "runs" / "engines-run"
    versions = sorted({(ep.step, ep.policy_version) for ep in open_run(run).episodes()})
    assert versions == [(0, 1), (1, 2)]  # SFT was update 1: the engine synced before step 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    syncs = [m["metrics"]["weight_sync/seconds"] for m in map(json.loads, lines)
             if "weight_sync/seconds" in m["metrics"]]
    assert len(syncs) == 2 and all(s > 0 for s in syncs)
    deadline = time.monotonic() + 30
    while local_ray.available_resources().get("CPU", 0) < free and time.monotonic() < deadline:
        time.sleep(0.5)
    assert local_ray.available_resources().get("CPU", 0) >= free  # the engine actor is gone


# ---------------------------------------------------------------------------- what a sync sends (vLLM)
@engine
def test_frozen_weights_go_once_and_again_whenever_they_change(engines) -> None:
    """Frozen embeddings (tied to the output head) are sent by the first sync only; the engine keeps serving
    them correctly from what it holds; a change of their bytes that torch's version counter does not see
    (`.data`) is sent all the same."""
    from rlvr.rollout.policies.weights import trainer_weights

    model = engines.model
    wte = model.transformer.wte.weight
    unique = {t.data_ptr(): t for _, t in trainer_weights(model)}.values()
    everything = sum(t.numel() * t.element_size() for t in unique)
    wte.requires_grad_(False)
    try:
        engines.version += 1
        engines.sync_weights()  # records what the engine holds
        with torch.no_grad():
            for p in model.transformer.h.parameters():
                p.mul_(1.01)  # an update of the trainable part
        engines.version += 1
        engines.sync_weights()
        assert engines.sync_bytes[-1] == everything - wte.numel() * wte.element_size()
        assert engines.engine_sync_seconds[-1] > 0
        skipped = engines.generate(CONVS, PARAMS)
        assert all(c.policy_version == engines.version for c in skipped) and gaps(model, skipped) < TOL
        old = copy.deepcopy(model)
        wte.data.mul_(1.5)  # behind autograd's back
        engines.version += 1
        engines.sync_weights()
        assert engines.sync_bytes[-1] == everything
        changed = engines.generate(CONVS, PARAMS)
        assert gaps(model, changed) < TOL and gaps(old, changed) > MOVED
    finally:
        wte.requires_grad_(True)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    """A tiny Llama (vLLM's LoRA support covers Llama, not GPT-2) with rlvr's built-in tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.rollout.policies.builtin import build_tokenizer

    tok = build_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    torch.manual_seed(11)
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def lora_engines(llama_dir, local_ray):
    from rlvr.rollout.fleet.engines import EnginesPolicy

    pol = EnginesPolicy(llama_dir, engines=1, device="cpu", lora_rank=8)
    yield pol
    pol.close()


@engine
def test_under_lora_only_the_adapter_goes_and_the_engine_samples_base_plus_adapter(lora_engines) -> None:
    """LoRA on the trainer, one AdamW step, a sync: only the adapter's bytes are sent, and the engine's
    log-probs are the trainer's merged-LoRA forward's, not the base model's. A second step gives a second
    adapter; merged weights sent in between (what a snapshot holds) are replaced by the base before the next
    adapter."""
    from peft import LoraConfig, get_peft_model

    from rlvr.rollout.policies.weights import snapshot
    from rlvr.train.update import PolicyUpdater, Sample

    pol = lora_engines
    pol.model = get_peft_model(pol.model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
    updater = PolicyUpdater(pol.model, TrainConfig(lr=2e-2), pad_id=pol.pad_id, temperature=1.0)
    adapter = sum(p.numel() * p.element_size() for n, p in pol.model.named_parameters() if ".lora_" in n)
    whole = sum(p.numel() * p.element_size() for n, p in pol.model.named_parameters() if ".lora_" not in n)

    def step() -> list:
        comps = pol.generate(CONVS, PARAMS)
        assert all(c.policy_version == pol.version for c in comps)
        samples = [Sample(c.prompt_token_ids + c.token_ids,
                          [0] * len(c.prompt_token_ids) + [1] * len(c.token_ids),
                          [0.0] * len(c.prompt_token_ids) + c.logprobs, 1.0 if i % 2 else -1.0)
                   for i, c in enumerate(comps)]
        updater.step(samples, seed=pol.version)
        pol.version += 1
        pol.sync_weights()
        return pol.generate(CONVS, PARAMS)

    before = None
    for _ in range(2):  # the second sync replaces the served adapter in place (the engine's fast path)
        after = step()
        assert pol.sync_bytes[-1] == adapter and adapter * 4 < whole
        merged = copy.deepcopy(pol.model).merge_and_unload()
        if before is not None:  # a second adapter unlike the first: an update that did nothing would show
            assert gaps(merged, before) > MOVED
        before = after
        with pol.model.disable_adapter():
            base_gap = gaps(pol.model, after)
        print(f"\nLoRA sync {pol.sync_seconds[-1] * 1e3:.1f} ms, {adapter} bytes; |engine - merged| "
              f"{gaps(merged, after):.2e}, |engine - base| {base_gap:.2e}")
        assert gaps(merged, after) < TOL and gaps(pol.model, after) < TOL
        assert base_gap > MOVED
    pol.sync_weights(snapshot(pol.model), version=pol.version)  # merged weights, as asynchronous mode sends
    assert pol.sync_bytes[-1] > whole * 0.9 and gaps(merged, pol.generate(CONVS, PARAMS)) < TOL
    after = step()
    assert pol.sync_bytes[-1] > whole  # the base again, then the adapter
    assert gaps(copy.deepcopy(pol.model).merge_and_unload(), after) < TOL
