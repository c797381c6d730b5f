"""The vllm backend end to end: engine tokens and log-probs against the trainer's forward pass, weight sync,
policy versions on episodes, `rlvr eval` and `rlvr train` through vLLM. The engine tests (`vllm` marker) run
in `make test-vllm`; the two input checks that need no engine run in `make test`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.config import RolloutConfig, TrainConfig
from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies.backends import make_policy
from rlvr.rollout.policy import SamplingParams
from rlvr.tasks.spec import Task, TaskLimits
from rlvr.train.update import PolicyUpdater, Sample, token_logprobs


def engine(test):
    """Needs vLLM: run by `make test-vllm` only (engine start-up is slow on a loaded machine: a longer
    timeout)."""
    return pytest.mark.vllm(pytest.mark.timeout(600)(test))


TOL = 2e-4
"""Largest |engine log-prob - trainer log-prob| accepted per token (float32 on CPU; measured about 1e-6)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    # head size 32: the smallest the vLLM CPU attention kernels support
    return build_tiny_model(tmp_path_factory.mktemp("vtiny"), n_layer=2, n_embd=64, n_head=2, n_positions=256,
                            seed=7)


@pytest.fixture(scope="module")
def policy(model_dir):
    pol = make_policy(f"vllm:{model_dir}")
    yield pol
    pol.close()


def trainer_logprobs(model, ids: list[int], temperature: float) -> list[float]:
    with torch.no_grad():
        t = torch.tensor([ids])
        return token_logprobs(model, t, torch.ones_like(t), temperature)[0].tolist()


def conv(text: str) -> list[Message]:
    return [Message(role="system", content="Answer."), Message(role="user", content=text)]


@engine
def test_tokens_and_logprobs_match_the_trainer(policy) -> None:
    convs = [conv("What is 6 * 7?"), conv("Name a prime."), conv("x" * 150)]
    for temperature in (1.0, 0.7, 0.0):  # 0: greedy, scored under the untempered distribution
        params = SamplingParams(temperature=temperature, max_new_tokens=24, seeds=(1, 2, 3))
        comps = policy.generate(convs, params)
        assert len(comps) == 3
        for c, m in zip(comps, convs):
            assert c.prompt_token_ids == policy.encode(policy.render(m))
            assert 0 < len(c.token_ids) == len(c.logprobs) <= 24 and c.finish_reason in ("stop", "length")
            assert len(c.prompt_token_ids) + len(c.token_ids) <= policy.max_context
            assert c.text == policy.decode(c.token_ids)
            if c.finish_reason == "stop":
                assert c.token_ids[-1] in policy.eos_ids  # the end token stays in the record
            ref = trainer_logprobs(policy.model, c.prompt_token_ids + c.token_ids, temperature or 1.0)
            gen = ref[len(c.prompt_token_ids):]
            assert max(abs(a - b) for a, b in zip(c.logprobs, gen)) < TOL
            if temperature == 0.0:  # greedy really is the argmax of the trainer's logits
                with torch.no_grad():
                    ids = torch.tensor([c.prompt_token_ids + c.token_ids])
                    logits = policy.model(input_ids=ids).logits[0]
                start = len(c.prompt_token_ids) - 1
                assert logits[start:start + len(c.token_ids)].argmax(-1).tolist() == c.token_ids


@engine
def test_seeds_make_streams_reproducible_and_distinct(policy) -> None:
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seeds=(5, 5, 6))
    a = policy.generate([conv("hi")] * 3, params)
    b = policy.generate([conv("hi")], SamplingParams(temperature=1.0, max_new_tokens=16, seeds=(5,)))
    assert a[0].token_ids == a[1].token_ids == b[0].token_ids  # same seed and prompt, whatever the batch
    assert a[2].token_ids != a[0].token_ids


@engine
def test_large_seeded_batches(policy) -> None:
    """More prompt tokens than one scheduler step takes (4096): every request still completes, seeds hold."""
    convs = [conv("y" * (60 + i % 40)) for i in range(96)]
    comps = policy.generate(convs, SamplingParams(temperature=1.0, max_new_tokens=6, seeds=tuple(range(96))))
    assert sum(len(c.prompt_token_ids) for c in comps) > 4096
    assert all(c.finish_reason in ("stop", "length") and 0 < len(c.token_ids) == len(c.logprobs)
               for c in comps)
    alone = policy.generate([convs[50]], SamplingParams(temperature=1.0, max_new_tokens=6, seeds=(50,)))[0]
    assert alone.token_ids == comps[50].token_ids


@engine
def test_context_budget_and_empty_prompts(policy) -> None:
    long = [list(range(10, 10 + policy.max_context))]  # fills the window: nothing may be generated
    comps = policy.generate([conv("a"), conv("b")], SamplingParams(max_new_tokens=8),
                            prompt_token_ids=[long[0], [10, 11]])
    assert comps[0].token_ids == [] and comps[0].finish_reason == "length"
    assert 0 < len(comps[1].token_ids) <= 8 and comps[1].prompt_token_ids == [10, 11]
    assert policy.generate([], SamplingParams()) == []
    with pytest.raises(ValueError):
        policy.generate([conv("a")], SamplingParams(seeds=(1, 2)))


def test_without_vllm_installed_the_backend_is_a_user_error(model_dir, monkeypatch) -> None:
    """Runs in `make test` too (where vLLM is absent): one line that says what to install."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # as if not installed
    with pytest.raises(UserError, match=r"rlvr\[vllm\]"):
        make_policy(f"vllm:{model_dir}")


def test_bad_specs_are_user_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="cannot load model"):
        make_policy(f"vllm:{tmp_path / 'missing'}")


def lenient_task() -> Task:
    return Task(id="q", domain="toy", prompt="What is 6 * 7?", verifier={"kind": "test-rollout-file"},
                limits=TaskLimits(max_tokens=20))


@engine
def test_training_steps_sync_weights_and_record_versions(policy, pool) -> None:
    """Rollout, a real AdamW step on the engine's tokens and log-probs, sync, and the next rollout."""
    engine = EnvRollouts(policy, pool, config=RolloutConfig(tool_workers=1),
                           sampling=SamplingParams(temperature=1.0, max_new_tokens=12))
    updater = PolicyUpdater(policy.model, TrainConfig(lr=5e-3), pad_id=policy.pad_id, temperature=1.0)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    for step in range(3):
        eps = engine.run([lenient_task(), lenient_task().model_copy(update={"id": "r"})], 3, step=step,
                         seed=11)
        assert all(ep.policy_version == step == policy.engine_version for ep in eps)
        samples = []
        for i, ep in enumerate(eps):
            assert len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs) and any(ep.loss_mask)
            ref = trainer_logprobs(policy.model, ep.token_ids, 1.0)  # on-policy: importance ratio 1
            gaps = [abs(a - b) for a, b, m in zip(ep.logprobs, ref, ep.loss_mask) if m]
            assert max(gaps) < TOL
            samples.append(Sample(ep.token_ids, ep.loss_mask, ep.logprobs, 1.0 if i % 2 else -1.0))
        metrics = updater.step(samples, seed=step)
        assert metrics["train/samples"] == 6.0
        policy.version += 1
        assert policy.sync_weights() >= 0 and policy.engine_version == policy.version
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert len(policy.sync_seconds) >= 3


@engine
def test_generate_syncs_a_stale_engine_and_reloads_from_a_directory(policy, tmp_path) -> None:
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seeds=(4,))
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    policy.version += 1  # the trainer changed the weights; generate() must not use the old ones
    comp = policy.generate([conv("hello")], params)[0]
    assert policy.engine_version == policy.version
    ref = trainer_logprobs(policy.model, comp.prompt_token_ids + comp.token_ids,
                           1.0)[len(comp.prompt_token_ids):]
    assert max(abs(a - b) for a, b in zip(comp.logprobs, ref)) < TOL
    saved = tmp_path / "ckpt"
    policy.model.save_pretrained(saved)  # a checkpoint on disk: the reload path
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    policy.sync_weights()
    moved = policy.generate([conv("hello")], params)[0]
    policy.sync_weights(saved, version=policy.version)
    again = policy.generate([conv("hello")], params)[0]
    assert again.token_ids == comp.token_ids and again.logprobs == pytest.approx(comp.logprobs, abs=TOL)
    assert moved.logprobs != pytest.approx(comp.logprobs, abs=TOL)
    with pytest.raises(UserError, match="not found"):
        policy.sync_weights(tmp_path / "nope")


@engine
def test_lora_adapters_sync_as_merged_weights(policy) -> None:
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(policy.model,
                          LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0,
                                                   fan_in_fan_out=True))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # adapters that change the output
    policy.model = lora  # what the trainer does with train.lora
    policy.version += 1
    comp = policy.generate([conv("adapters")], SamplingParams(max_new_tokens=10, seeds=(3,)))[0]
    ref = trainer_logprobs(lora, comp.prompt_token_ids + comp.token_ids, 1.0)[len(comp.prompt_token_ids):]
    assert max(abs(a - b) for a, b in zip(comp.logprobs, ref)) < TOL
    # training still sees separate adapters
    assert not any(getattr(m, "merged", False) for m in lora.modules())
    policy.model = lora.merge_and_unload()
    policy.version += 1


@engine
def test_rlvr_eval_through_vllm(cli, model_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli(["eval", "--policy", f"vllm:{model_dir}", "--tasks", "math:3", "-k", "2", "--json"])
    assert res.code == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["policy"] == f"vllm:{model_dir}" and rep["episodes"] == 6
    assert rep["domains"]["math"]["samples"] + rep["domains"]["math"]["masked_episodes"] == 6


def _train_toml(tmp_path, model_dir, name: str, steps: int, extra_train: str = "", extra_policy: str = "",
                tail: str = "") -> Path:
    """A short vllm-backend run on math (`extra_*` lines go into their sections, `tail` after the last)."""
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f"""name = "{name}"
output_dir = "{tmp_path / 'runs'}"
[tasks]
train = "math"
heldout = "math:2"
[sandbox]
isolation = "none"
workers = 1
[policy]
backend = "vllm"
model = "{model_dir}"
max_new_tokens = 8
{extra_policy}
[rollout]
group_size = 2
[train]
steps = {steps}
batch_size = 2
heldout_samples = 1
heldout_greedy = false
truncation = "score"  # answers cut at 8 tokens are trained on as they stand: every step updates
{extra_train}
[sft]
steps = 3
examples = 24
batch_size = 8
[schedule]
skip_zero_variance = false
[monitor]
report = false
{tail}""")
    return cfg


def _metrics(run_dir: Path, key: str) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [m["metrics"][key] for m in map(json.loads, lines) if key in m["metrics"]]


@engine
def test_rlvr_train_through_vllm(cli, model_dir, tmp_path, monkeypatch) -> None:
    from rlvr.store.episodes import open_run

    monkeypatch.chdir(tmp_path)
    res = cli(["train", str(_train_toml(tmp_path, model_dir, "vllm-run", 2))])
    assert res.code == 0, res.stderr + res.stdout
    eps = open_run(tmp_path / "runs" / "vllm-run").episodes()
    versions = sorted({(ep.step, ep.policy_version) for ep in eps})  # one version per step, +1 per update
    assert [s for s, _ in versions] == [0, 1] and versions[1][1] == versions[0][1] + 1
    assert versions[0][1] == 1  # the SFT warm start was an update too: the engine synced before step 0
    assert (tmp_path / "runs" / "vllm-run" / "model" / "config.json").is_file()
    syncs = _metrics(tmp_path / "runs" / "vllm-run", "weight_sync/seconds")
    assert len(syncs) == 2 and all(s >= 0 for s in syncs)


@engine
def test_rlvr_train_through_vllm_asynchronously(cli, model_dir, tmp_path, monkeypatch) -> None:
    """max_staleness = 1: the engine samples step s with the weights after step s - 1's predecessor."""
    from rlvr.store.episodes import open_run

    monkeypatch.chdir(tmp_path)
    res = cli(["train", str(_train_toml(tmp_path, model_dir, "vllm-async", 3, "max_staleness = 1"))])
    assert res.code == 0, res.stderr + res.stdout
    run = tmp_path / "runs" / "vllm-async"
    versions = sorted({(ep.step, ep.policy_version) for ep in open_run(run).episodes()})
    assert versions == [(0, 1), (1, 1), (2, 2)]  # SFT is version 1; step 2 was sampled before update 1 ended
    assert _metrics(run, "train/staleness_max") == [0.0, 1.0, 1.0]
    assert _metrics(run, "train/stale_groups") == [0.0, 0.0, 0.0]
    assert len(_metrics(run, "weight_sync/seconds")) == 3


@engine
def test_a_model_the_engine_cannot_serve_is_a_user_error(tmp_path) -> None:
    """Head size 16 has no vLLM CPU attention kernel: one clear line naming the model, no traceback."""
    from rlvr.rollout.policies.builtin import build_tiny_model

    bad = build_tiny_model(tmp_path / "h16", n_layer=1, n_embd=32, n_head=2, n_positions=64, seed=1)
    with pytest.raises(UserError, match="vLLM cannot serve this model") as info:
        make_policy(f"vllm:{bad}")
    assert str(bad) in str(info.value) and "\n" not in str(info.value)
