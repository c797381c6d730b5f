"""Invariants of the policy update: accumulation, zero-signal groups, on-policy ratios, masked episodes, the
behaviour corrections and the mismatch and entropy figures."""
from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import random
import warnings

import pytest
import torch

from rlvr.config import TrainConfig
from rlvr.errors import UserError
from rlvr.rollout.episode import Episode
from rlvr.rollout.policies.hf import sequence_logprobs
from rlvr.train.advantages import episode_advantages
from rlvr.train.update import PolicyUpdater, Sample, correction_settings, mismatch_metrics, samples_from
from rlvr.verify.verdict import Verdict


def _episodes(policy, n_groups: int = 2, group: int = 4, flat: bool = False, seed: int = 0,
              prefix: str = "g") -> list[Episode]:
    """Groups of episodes with random generated tokens and their true behaviour log-probs."""
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        prompt = [rng.randrange(10, 100) for _ in range(rng.randint(3, 8))]
        for i in range(group):
            gen = [rng.randrange(10, 100) for _ in range(rng.randint(1, 6))]
            ids = prompt + gen
            lps = sequence_logprobs(policy.model, ids)
            mask = [0] * len(prompt) + [1] * len(gen)
            reward = 0.5 if flat else float((i + g) % 2)
            out.append(Episode(task_id=f"t{g}", domain="code", group_id=f"{prefix}{g}", sample_index=i,
                               token_ids=ids,
                               loss_mask=mask, logprobs=[lp if m else 0.0 for lp, m in zip(lps, mask)],
                               reward=reward, verdict=Verdict(score=reward, passed=reward == 1.0),
                               status="done"))
    return out


def _grads(policy, samples: list[Sample], **cfg) -> dict[str, torch.Tensor]:
    """The gradient an optimizer step would apply (lr 0 leaves the weights unchanged; grads are captured)."""
    up = PolicyUpdater(policy.model, TrainConfig(**cfg), pad_id=policy.pad_id)
    captured: dict[str, torch.Tensor] = {}
    orig = up.optimizer.step

    def capture(*a, **k):
        for name, p in policy.model.named_parameters():
            if p.grad is not None:
                captured[name] = p.grad.detach().clone()
        return orig(*a, **k)

    up.optimizer.step = capture  # type: ignore[method-assign]
    with warnings.catch_warnings():  # torch warns that step was replaced after the schedule was made
        warnings.simplefilter("ignore")
        up.step(samples)
    return captured


@pytest.mark.parametrize("aggregation", ["token", "sequence", "constant"])
def test_accumulation_1x8_equals_8x1(tiny_policy, aggregation: str) -> None:
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    samples = samples_from(eps, episode_advantages(eps, "grpo"))
    assert len(samples) == 8
    one = _grads(tiny_policy, samples, micro_batch_size=8, aggregation=aggregation, max_grad_norm=1e9,
                 lr=1e-12)
    eight = _grads(tiny_policy, samples, micro_batch_size=1, aggregation=aggregation, max_grad_norm=1e9,
                   lr=1e-12)
    assert one and one.keys() == eight.keys()
    for name in one:
        torch.testing.assert_close(one[name], eight[name], rtol=1e-5, atol=1e-7)
    assert any(float(g.abs().max()) > 0 for g in one.values())


def test_group_with_equal_rewards_contributes_zero_gradient(tiny_policy) -> None:
    eps = _episodes(tiny_policy, n_groups=2, group=4, flat=True)
    samples = samples_from(eps, episode_advantages(eps, "grpo"))
    grads = _grads(tiny_policy, samples, lr=1e-12)
    assert grads and all(float(g.abs().max()) == 0.0 for g in grads.values())
    # and a flat group beside an informative one changes nothing about the informative one's gradient
    mixed = _episodes(tiny_policy, n_groups=1, group=4, seed=5, prefix="other") + eps
    informative = [s for s in samples_from(mixed, episode_advantages(mixed, "dr_grpo")) if s.advantage != 0.0]
    alone = _grads(tiny_policy, informative, aggregation="sequence", lr=1e-12, max_grad_norm=1e9)
    both = _grads(tiny_policy, samples_from(mixed, episode_advantages(mixed, "dr_grpo")),
                  aggregation="sequence",
                  lr=1e-12, max_grad_norm=1e9)
    for name in alone:  # sequence aggregation divides by the sequence count: scale accordingly
        torch.testing.assert_close(alone[name] * len(informative) / 12, both[name], rtol=1e-5, atol=1e-7)


def test_on_policy_ratios_are_one_and_the_update_moves_towards_reward(tiny_policy) -> None:
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    adv = episode_advantages(eps, "grpo")
    samples = samples_from(eps, adv)
    up = PolicyUpdater(tiny_policy.model, TrainConfig(lr=1e-2), pad_id=tiny_policy.pad_id)
    before = {ep.episode_id: sum(lp for lp,
                                 m in zip(sequence_logprobs(tiny_policy.model, ep.token_ids), ep.loss_mask)
                                 if m) for ep in eps}
    metrics = up.step(samples)
    assert metrics["train/ratio"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["train/clip_frac"] == 0.0
    after = {ep.episode_id: sum(lp for lp,
                                m in zip(sequence_logprobs(tiny_policy.model, ep.token_ids), ep.loss_mask)
                                if m) for ep in eps}
    up_good = [after[i] - before[i] for i in adv if adv[i] > 0]
    up_bad = [after[i] - before[i] for i in adv if adv[i] < 0]
    assert sum(up_good) / len(up_good) > sum(up_bad) / len(up_bad)


def test_masked_and_empty_episodes_are_not_trained_on(tiny_policy) -> None:
    eps = _episodes(tiny_policy, n_groups=1, group=4)
    eps[0] = eps[0].model_copy(update={"status": "infra_error", "verdict": Verdict.infra("sandbox died")})
    eps[1] = eps[1].model_copy(update={"loss_mask": [0] * len(eps[1].loss_mask)})
    samples = samples_from(eps, episode_advantages(eps, "grpo"))
    assert len(samples) == 2
    bad = eps[2].model_copy(update={"logprobs": eps[2].logprobs[:-1]})
    with pytest.raises(ValueError, match="differ in length"):
        samples_from([bad], {bad.episode_id: 1.0})


def test_empty_batch_still_steps_the_schedule(tiny_policy) -> None:
    up = PolicyUpdater(tiny_policy.model, TrainConfig(warmup_steps=4, lr=1e-3), pad_id=tiny_policy.pad_id)
    assert up.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)
    metrics = up.step([])
    assert metrics["train/samples"] == 0.0
    assert metrics["train/lr"] == pytest.approx(5e-4)


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_learning_rate_decays_to_its_final_fraction_at_the_last_step(tiny_policy, decay: str) -> None:
    cfg = TrainConfig(lr=1e-3, steps=10, warmup_steps=2, lr_decay=decay, lr_final=0.2)
    up = PolicyUpdater(tiny_policy.model, cfg, pad_id=tiny_policy.pad_id)
    seen = []
    for _ in range(cfg.steps):  # the rate each step's update uses
        seen.append(up.optimizer.param_groups[0]["lr"])
        up.step([])
    assert seen[:3] == pytest.approx([5e-4, 1e-3, 1e-3])  # warm-up, then the peak
    assert seen[-1] == pytest.approx(2e-4) and all(a >= b for a, b in itertools.pairwise(seen[1:]))
    middle = seen[2 + (cfg.steps - 3) // 2]
    assert 2e-4 < middle < 1e-3
    constant = PolicyUpdater(tiny_policy.model, TrainConfig(lr=1e-3, steps=10, lr_decay="constant"),
                             pad_id=tiny_policy.pad_id)
    for _ in range(10):
        constant.step([])
    assert constant.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)


def test_lora_trains_adapters_only_with_the_base_model_as_kl_reference(tiny_policy) -> None:
    from rlvr.train.update import apply_lora

    apply_lora(tiny_policy, 4)
    model = tiny_policy.model
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    up = PolicyUpdater(model, TrainConfig(lr=1e-2, kl_coef=0.1), pad_id=tiny_policy.pad_id)
    metrics = up.step(samples_from(eps, episode_advantages(eps, "grpo")))
    # adapters start as a no-op: policy == reference
    assert metrics["train/kl"] == pytest.approx(0.0, abs=1e-6)
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.abs().max()) > 0 for p in lora_b)
    metrics = up.step(samples_from(eps, episode_advantages(eps, "grpo")))
    assert metrics["train/kl"] > 0.0  # after an update the policy has moved away from its frozen base


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_bf16_autocasts_the_forward_and_keeps_float32_weights_and_state(tiny_policy, precision: str) -> None:
    model = tiny_policy.model
    ref = copy.deepcopy(model).eval()  # the KL reference: a separate model, autocast as well
    seen: set[torch.dtype] = set()  # what the first block's MLP projection computes in
    ref_seen: set[torch.dtype] = set()
    hook = model.transformer.h[0].mlp.c_fc.register_forward_hook(lambda mod, args, out: seen.add(out.dtype))
    ref.transformer.h[0].mlp.c_fc.register_forward_hook(lambda mod, args, out: ref_seen.add(out.dtype))
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    before = set(seen)  # the behaviour log-probs above: float32, outside the update
    seen.clear()
    up = PolicyUpdater(model, TrainConfig(lr=1e-2, kl_coef=0.1, mixed_precision=precision),
                       pad_id=tiny_policy.pad_id, ref_model=ref)
    losses = [up.step(samples_from(eps, episode_advantages(eps, "grpo")))["train/loss"] for _ in range(3)]
    hook.remove()
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    assert before == {torch.float32} and seen == ref_seen == {want}
    assert all(math.isfinite(x) for x in losses) and len(set(losses)) > 1  # it trained
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert {v.dtype for st in up.optimizer.state.values() for v in st.values() if v.dim()} == {torch.float32}


# -------------------------------------------------------------- new objectives, corrections, mismatch figures
@pytest.mark.parametrize("cfg", [{"loss": "gspo", "aggregation": "sequence"}, {"loss": "cispo"},
                                 {"off_policy": "decoupled", "is_correction": "mis", "is_level": "sequence",
                                  "is_mask_low": 0.9, "is_mask_high": 1.1},
                                 {"off_policy": "decoupled", "loss": "gspo", "is_level": "geometric"}])
def test_accumulation_1x8_equals_8x1_for_the_new_objectives(tiny_policy, cfg: dict) -> None:
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    samples = [dataclasses.replace(s,
                                   logprobs=[lp - 0.05 * (i % 3) * m for lp,
                                             m in zip(s.logprobs, s.loss_mask)])
               # a little off-policy
               for i, s in enumerate(samples_from(eps, episode_advantages(eps, "grpo")))]
    one = _grads(tiny_policy, samples, micro_batch_size=8, max_grad_norm=1e9, lr=1e-12, **cfg)
    eight = _grads(tiny_policy, samples, micro_batch_size=1, max_grad_norm=1e9, lr=1e-12, **cfg)
    assert one and one.keys() == eight.keys()
    for name in one:
        torch.testing.assert_close(one[name], eight[name], rtol=1e-5, atol=1e-7)
    assert any(float(g.abs().max()) > 0 for g in one.values())


def _shifted(samples: list[Sample], shift: float) -> list[Sample]:
    """The samples as if a sampler had given every generated token `shift` nats less than the trainer does."""
    return [dataclasses.replace(s, logprobs=[lp - shift * m for lp, m in zip(s.logprobs, s.loss_mask)])
            for s in samples]


def _entropy_by_hand(policy, samples: list[Sample]) -> float:
    values = []
    with torch.no_grad():
        for s in samples:
            logits = policy.model(input_ids=torch.tensor([s.token_ids])).logits[0].double()
            for t, m in enumerate(s.loss_mask):
                if m:
                    p = torch.softmax(logits[t - 1], -1)
                    values.append(float(-(p * torch.log(p)).sum()))
    return sum(values) / len(values)


@pytest.mark.parametrize("off_policy", ["behaviour", "decoupled"])
def test_mismatch_and_entropy_are_logged_every_step(tiny_policy, off_policy: str) -> None:
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    samples = samples_from(eps, episode_advantages(eps, "grpo"))
    up = PolicyUpdater(tiny_policy.model, TrainConfig(lr=1e-12, off_policy=off_policy),
                       pad_id=tiny_policy.pad_id)
    entropy = _entropy_by_hand(tiny_policy, samples)
    on = up.step(samples)
    assert on["mismatch/kl"] == pytest.approx(0.0, abs=1e-9)
    for q in ("p5", "p50", "p95", "min", "max"):
        assert on[f"mismatch/ratio_{q}"] == pytest.approx(1.0, abs=1e-5)
    assert on["policy/entropy"] == pytest.approx(entropy, rel=1e-5) and 0 < entropy
    # a sampler 0.3 nats below the trainer on every token: rho = e^0.3 everywhere, k3 = e^0.3 - 1 - 0.3
    off = up.step(_shifted(samples, 0.3))
    assert off["mismatch/kl"] == pytest.approx(math.exp(0.3) - 1.3, rel=1e-4)
    assert off["mismatch/ratio_p5"] == pytest.approx(math.exp(0.3), rel=1e-4)
    assert off["mismatch/ratio_max"] == pytest.approx(math.exp(0.3), rel=1e-4)


def test_mismatch_quantiles_by_hand() -> None:
    log_rho = torch.log(torch.tensor([0.5, 1.0, 1.0, 1.0, 2.0]))
    m = mismatch_metrics(log_rho, torch.tensor([1.0, 3.0]))
    assert m["mismatch/ratio_p50"] == pytest.approx(1.0) and m["mismatch/ratio_max"] == pytest.approx(2.0)
    assert m["mismatch/ratio_min"] == pytest.approx(0.5)
    assert (m["mismatch/ratio_p5"] == pytest.approx(0.5 + 0.2 * 0.5)
            and m["mismatch/ratio_p95"] == pytest.approx(1.8))
    k3 = [r - 1 - math.log(r) for r in (0.5, 1.0, 1.0, 1.0, 2.0)]
    assert m["mismatch/kl"] == pytest.approx(sum(k3) / 5) and m["policy/entropy"] == pytest.approx(2.0)
    assert mismatch_metrics(torch.zeros(0), torch.zeros(0)) == {}


def test_mis_drops_mismatched_tokens_and_tis_truncates_them(tiny_policy) -> None:
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    samples = _shifted(samples_from(eps, episode_advantages(eps, "grpo")), 1.0)  # rho = e: outside [0.5, 2]
    mis = _grads(tiny_policy, samples, off_policy="decoupled", is_correction="mis", lr=1e-12)
    assert mis and all(float(g.abs().max()) == 0.0 for g in mis.values())  # every token dropped: no gradient
    tis = _grads(tiny_policy, samples, off_policy="decoupled", is_correction="tis", is_cap=2.0, lr=1e-12,
                 max_grad_norm=1e9)
    plain = _grads(tiny_policy, samples_from(eps, episode_advantages(eps, "grpo")), off_policy="decoupled",
                   lr=1e-12, max_grad_norm=1e9)
    for name in plain:  # every weight truncated at 2: twice the on-policy gradient
        torch.testing.assert_close(tis[name], 2.0 * plain[name], rtol=1e-5, atol=1e-7)
    up = PolicyUpdater(tiny_policy.model, TrainConfig(lr=1e-12, off_policy="decoupled", is_correction="mis"),
                       pad_id=tiny_policy.pad_id)
    metrics = up.step(samples)
    assert metrics["train/is_masked"] == 1.0 and metrics["train/is_weight"] == 0.0


def test_correction_settings_are_checked(tiny_policy) -> None:
    with pytest.raises(UserError, match=r"train.is_correction.*did you mean 'mis'"):
        correction_settings(TrainConfig(off_policy="decoupled", is_correction="mys"))
    with pytest.raises(UserError, match=r"train.is_level.*did you mean 'sequence'"):
        correction_settings(TrainConfig(off_policy="decoupled", is_level="sequense"))
    with pytest.raises(UserError, match=r"train.is_correction.*off_policy = \"decoupled\""):
        PolicyUpdater(tiny_policy.model, TrainConfig(is_correction="mis"), pad_id=tiny_policy.pad_id)
    with pytest.raises(UserError, match="train.is_level"):
        correction_settings(TrainConfig(is_level="sequence"))
    name, settings = correction_settings(TrainConfig(off_policy="decoupled", is_correction="mis",
                                                     is_mask_low=0.8,
                                                     is_mask_high=1.25, is_level="geometric"))
    assert name == "mis" and (settings.low, settings.high, settings.level) == (0.8, 1.25, "geometric")


def test_mismatch_is_measured_at_the_starting_weights_only(tiny_policy) -> None:
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    samples = samples_from(eps, episode_advantages(eps, "grpo"))
    # two optimizer steps with a large learning rate: the second minibatch's forward passes see moved weights,
    # which are not the sampler's; only the first minibatch (before any step) may be measured
    up = PolicyUpdater(tiny_policy.model, TrainConfig(lr=5e-2, minibatches=2, epochs=2),
                       pad_id=tiny_policy.pad_id)
    metrics = up.step(samples)
    assert metrics["train/ratio"] != pytest.approx(1.0, abs=1e-4)  # the later passes did move
    assert metrics["mismatch/kl"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["mismatch/ratio_max"] == pytest.approx(1.0, abs=1e-5)


def test_entropy_over_several_chunks_matches_the_definition() -> None:
    from rlvr.train.update import ENTROPY_CHUNK, generated_entropy

    torch.manual_seed(0)
    vocab = 5000
    logits = torch.randn(3, 300, vocab) * 3
    mask = (torch.rand(3, 301) < 0.7).float()
    assert int(mask[:, 1:].sum()) > 2 * ENTROPY_CHUNK["cpu"] // vocab  # more than two chunks
    p = torch.softmax(logits.double(), -1)
    by_hand = -(p * torch.log(p)).sum(-1)[mask[:, 1:].bool()]
    torch.testing.assert_close(generated_entropy(logits, mask).double(), by_hand, rtol=1e-5, atol=1e-5)
    assert generated_entropy(logits, torch.zeros(3, 301)).numel() == 0


@pytest.mark.parametrize(("loss", "paper", "not_paper"), [
    ("gspo", {"aggregation": "sequence", "clip_low": 3e-4, "clip_high": 4e-4}, {"aggregation": "token"}),
    ("cispo", {"aggregation": "token", "clip_low": 1.0, "clip_high": 4.0}, {"clip_low": 0.2})])
def test_a_loss_alone_gets_its_papers_settings(tiny_policy, loss: str, paper: dict, not_paper: dict) -> None:
    """`loss = "gspo"` alone is GSPO's sequence mean and tight clip, `loss = "cispo"` alone CISPO's open lower
    bound: the same gradient as those settings written out, not the one of the setting that differs."""
    eps = _episodes(tiny_policy, n_groups=2, group=4)
    # the sampler liked some tokens more than the trainer does now (ratios 0.6 and 1.35): both clips matter
    samples = [dataclasses.replace(s, logprobs=[lp + (0.5 if i % 2 else -0.3) * m
                                                for lp, m in zip(s.logprobs, s.loss_mask)])
               for i, s in enumerate(samples_from(eps, episode_advantages(eps, "grpo")))]
    alone = _grads(tiny_policy, samples, loss=loss, max_grad_norm=1e9, lr=1e-12)
    written = _grads(tiny_policy, samples, loss=loss, max_grad_norm=1e9, lr=1e-12, **paper)
    other = _grads(tiny_policy, samples, loss=loss, max_grad_norm=1e9, lr=1e-12, **not_paper)
    for name in alone:
        torch.testing.assert_close(alone[name], written[name], rtol=1e-6, atol=1e-9)
    assert any(not torch.allclose(alone[n], other[n], rtol=1e-4, atol=1e-7) for n in alone)
