"""Losses, aggregations and behaviour corrections against hand-computed values, and their invariants."""
from __future__ import annotations

import math

import pytest
import torch

from rlvr.errors import UserError
from rlvr.train.losses import (
    AGGREGATIONS,
    IS_CORRECTIONS,
    IS_LEVELS,
    LOSSES,
    BatchTotals,
    CorrectionSettings,
    LossSettings,
    TokenBatch,
    aggregate_fn,
    behaviour_weight,
    loss_fn,
)


def _batch(logp: list[list[float]], old: list[list[float]], adv: list[float], mask: list[list[float]],
           ref: list[list[float]] | None = None) -> TokenBatch:
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    return TokenBatch(logp=t(logp), old_logp=t(old), advantages=t(adv), mask=t(mask),
                      ref_logp=t(ref) if ref is not None else None)


def test_ppo_clip_by_hand() -> None:
    # ratios e^0.5 = 1.6487 (clipped to 1.2 for A>0), e^-0.5 = 0.6065 (clipped to 0.8 for A<0), 1.0
    b = _batch([[0.0, -1.0, -1.0]], [[-0.5, -0.5, -1.0]], [2.0], [[1, 1, 1]])
    loss, stats = LOSSES["ppo_clip"](b, LossSettings(clip_low=0.2, clip_high=0.2))
    assert loss[0].tolist() == pytest.approx([-1.2 * 2, -math.exp(-0.5) * 2, -2.0])
    assert stats["clip_frac"][0].tolist() == [1.0, 0.0, 0.0]
    b = _batch([[0.0, -1.0]], [[-0.5, -0.5]], [-1.0], [[1, 1]])
    loss, _ = LOSSES["ppo_clip"](b, LossSettings(clip_low=0.2, clip_high=0.28))
    # A<0: -min(r*A, clip(r)*A) = max(r, clip(r)) * |A|
    assert loss[0].tolist() == pytest.approx([math.exp(0.5), 0.8])


def test_clip_higher_widens_only_the_upper_range() -> None:
    b = _batch([[0.0]], [[-0.5]], [1.0], [[1]])
    loss, _ = LOSSES["ppo_clip"](b, LossSettings(clip_low=0.2, clip_high=0.28))
    assert loss.item() == pytest.approx(-1.28)


def test_kl_penalty_k3_by_hand() -> None:
    b = _batch([[-1.0]], [[-1.0]], [0.0], [[1]], ref=[[-2.0]])
    loss, stats = LOSSES["ppo_clip"](b, LossSettings(kl_coef=0.5))
    d = -1.0
    assert loss.item() == pytest.approx(0.5 * (math.exp(d) - d - 1))
    assert stats["kl"].item() == pytest.approx(math.exp(d) - d - 1)
    with pytest.raises(ValueError):
        LOSSES["ppo_clip"](_batch([[-1.0]], [[-1.0]], [0.0], [[1]]), LossSettings(kl_coef=0.5))


def test_policy_gradient_by_hand() -> None:
    b = _batch([[0.0, -1.0]], [[0.0, -0.5]], [3.0], [[1, 1]])
    loss, _ = LOSSES["pg"](b, LossSettings())
    assert loss[0].tolist() == pytest.approx([-3.0, -3.0 * math.exp(-0.5)])


def test_aggregations_by_hand() -> None:
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    totals = BatchTotals(tokens=3, sequences=2, norm_length=10)
    assert AGGREGATIONS["token"](loss, mask, totals).item() == pytest.approx((1 + 2 + 4) / 3)
    assert AGGREGATIONS["sequence"](loss, mask, totals).item() == pytest.approx((1.5 + 4) / 2)
    assert AGGREGATIONS["constant"](loss, mask, totals).item() == pytest.approx(7 / 20)


def test_unknown_names_are_user_errors() -> None:
    with pytest.raises(UserError, match="train.loss"):
        loss_fn("ppo")
    with pytest.raises(UserError, match="train.aggregation"):
        aggregate_fn("mean")


# ------------------------------------------------------------------------------------------------ GSPO
def _grad(fn, b: TokenBatch, s: LossSettings, aggregation: str = "sequence") -> tuple[torch.Tensor,
                                                                                      torch.Tensor]:
    """(batch loss, its gradient with respect to the new log-probs)."""
    logp = b.logp.clone().requires_grad_(True)
    loss, _ = fn(TokenBatch(logp=logp, old_logp=b.old_logp, advantages=b.advantages, mask=b.mask,
                            is_weight=b.is_weight), s)
    totals = BatchTotals(tokens=float(b.mask.sum()), sequences=float(b.mask.shape[0]), norm_length=4)
    total = AGGREGATIONS[aggregation](loss, b.mask, totals)
    total.backward()
    return total.detach(), logp.grad


def test_gspo_sequence_ratio_and_gradient_by_hand() -> None:
    # log ratios 0.1 and 0.3 on the generated tokens (the padded third is ignored): s = exp(0.2)
    b = _batch([[-1.0, -1.0, 5.0]], [[-1.1, -1.3, 0.0]], [2.0], [[1, 1, 0]])
    s = math.exp(0.2)
    loss, stats = LOSSES["gspo"](b, LossSettings(clip_low=0.2, clip_high=0.3))
    assert loss[0, :2].tolist() == pytest.approx([-2.0 * s] * 2)
    assert stats["ratio"][0, 0].item() == pytest.approx(s) and stats["clip_frac"][0, 0].item() == 0.0
    total, grad = _grad(LOSSES["gspo"], b, LossSettings(clip_low=0.2, clip_high=0.3))
    # d(-A s)/d logp_t = -A s / |y| for each generated token, 0 for the padding
    assert total.item() == pytest.approx(-2.0 * s)
    assert grad[0].tolist() == pytest.approx([-2.0 * s / 2, -2.0 * s / 2, 0.0])


def test_gspo_clips_the_sequence_at_its_bounds() -> None:
    s = LossSettings(clip_low=0.1, clip_high=0.1)
    above = _batch([[0.0, 0.0]], [[-0.2, 0.0]], [1.0], [[1, 1]])  # s = e^0.1 = 1.105 > 1.1: clipped for A > 0
    loss, stats = LOSSES["gspo"](above, s)
    assert loss[0].tolist() == pytest.approx([-1.1, -1.1]) and stats["clip_frac"][0].tolist() == [1.0, 1.0]
    assert torch.all(_grad(LOSSES["gspo"], above, s)[1] == 0)
    # the same ratio with A < 0 is not clipped (the pessimistic side is the unclipped one): a gradient flows
    assert torch.all(_grad(LOSSES["gspo"], _batch([[0.0, 0.0]], [[-0.2, 0.0]], [-1.0], [[1, 1]]), s)[1] != 0)
    # s = e^-0.11 = 0.896 < 0.9: clipped for A < 0
    below = _batch([[0.0, 0.0]], [[0.1, 0.12]], [-1.0], [[1, 1]])
    loss, _ = LOSSES["gspo"](below, s)
    assert loss[0].tolist() == pytest.approx([0.9, 0.9])
    assert torch.all(_grad(LOSSES["gspo"], below, s)[1] == 0)
    inside = _batch([[0.0, 0.0]], [[-0.1, -0.09]], [1.0], [[1, 1]])  # s = e^0.095 = 1.0997: just inside
    assert torch.all(_grad(LOSSES["gspo"], inside, s)[1] != 0)


def test_on_policy_gspo_and_cispo_are_the_plain_policy_gradient() -> None:
    logp = [[-0.5, -1.5, -2.0], [-0.7, -0.2, 0.0]]
    b = _batch(logp, logp, [1.5, -0.5], [[1, 1, 1], [1, 1, 0]])
    for aggregation in ("token", "sequence"):
        _, pg = _grad(LOSSES["pg"], b, LossSettings(), aggregation)
        for name in ("gspo", "cispo", "ppo_clip"):
            _, g = _grad(LOSSES[name], b, LossSettings(), aggregation)
            torch.testing.assert_close(g, pg, msg=f"{name} ({aggregation})")


# ------------------------------------------------------------------------------------------------ CISPO
def test_cispo_keeps_the_gradient_of_clipped_tokens() -> None:
    # ratios e^0.5 (weight clipped to 1.2) and e^-0.5 (0.607, clipped up to 0.8), advantage 2
    b = _batch([[-1.0, -2.0]], [[-1.5, -1.5]], [2.0], [[1, 1]])
    s = LossSettings(clip_low=0.2, clip_high=0.2)
    loss, stats = LOSSES["cispo"](b, s)
    assert loss[0].tolist() == pytest.approx([-1.2 * 2.0 * -1.0, -0.8 * 2.0 * -2.0])
    assert stats["clip_frac"][0].tolist() == [1.0, 1.0]
    _, grad = _grad(LOSSES["cispo"], b, s, "token")
    assert grad[0].tolist() == pytest.approx([-1.2 * 2.0 / 2, -0.8 * 2.0 / 2])  # -sg[w] * A / tokens
    _, ppo = _grad(LOSSES["ppo_clip"], b, s, "token")
    assert ppo[0, 0].item() == 0.0  # where PPO drops the clipped token
    # clip_low 1: no lower bound in effect (MiniMax), the weight is the ratio itself below 1
    loss, _ = LOSSES["cispo"](b, LossSettings(clip_low=1.0, clip_high=0.2))
    assert loss[0, 1].item() == pytest.approx(-math.exp(-0.5) * 2.0 * -2.0)


# ------------------------------------------------------------------------------------ behaviour correction
def _weight(correction: str, trainer: list[list[float]], behaviour: list[list[float]],
            mask: list[list[float]],
            **settings) -> tuple[torch.Tensor | None, dict]:
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    return behaviour_weight(t(trainer), t(behaviour), t(mask), correction, CorrectionSettings(**settings))


def test_tis_truncates_at_token_and_sequence_level() -> None:
    trainer, behaviour, mask = [[0.0, 0.0, 0.0]], [[-1.0, 0.2, 0.0]], [[1, 1, 0]]  # rho_t = e, e^-0.2
    w, stats = _weight("tis", trainer, behaviour, mask, level="token", cap=2.0)
    assert w[0, :2].tolist() == pytest.approx([2.0, math.exp(-0.2)])
    assert stats["is_truncated"][0, :2].tolist() == [1.0, 0.0]
    w, _ = _weight("tis", trainer, behaviour, mask, level="sequence", cap=5.0)  # product e^0.8 = 2.23, kept
    assert w[0].tolist() == pytest.approx([math.exp(0.8)] * 3)
    w, _ = _weight("tis", trainer, behaviour, mask, level="geometric", cap=5.0)  # geometric mean e^0.4
    assert w[0].tolist() == pytest.approx([math.exp(0.4)] * 3)


def test_mis_drops_what_leaves_the_band() -> None:
    trainer, behaviour, mask = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[-1.0, 0.2, 0.0], [0.1, -0.1, 0.0]], \
        [[1, 1, 1], [1, 1, 1]]
    w, stats = _weight("mis", trainer, behaviour, mask, level="token", low=0.5, high=2.0)
    # e > 2: dropped; the rest weighted by rho
    assert w[0].tolist() == pytest.approx([0.0, math.exp(-0.2), 1.0])
    assert stats["is_masked"][0].tolist() == [1.0, 0.0, 0.0]
    w, stats = _weight("mis", trainer, behaviour, mask, level="sequence", low=0.5, high=2.0)
    assert w[0].tolist() == [0.0] * 3  # the first sequence's product e^0.8 leaves the band: all of it dropped
    assert w[1].tolist() == pytest.approx([1.0] * 3)  # the second's is exactly 1
    # the bounds themselves are inside the band
    w, _ = _weight("mis", [[0.0]], [[-math.log(2.0)]], [[1]], level="token", low=0.5, high=2.0)
    assert w.item() == pytest.approx(2.0)


def test_a_long_sequence_product_stays_finite() -> None:
    trainer, behaviour, mask = [[0.0] * 400], [[-0.5] * 400], [[1] * 400]  # product e^200
    w, _ = _weight("tis", trainer, behaviour, mask, level="sequence", cap=3.0)
    assert torch.all(w == 3.0)
    w, _ = _weight("mis", trainer, behaviour, mask, level="sequence")
    assert torch.all(w == 0.0) and torch.isfinite(w).all()
    assert _weight("none", trainer, behaviour, mask) == (None, {})


def test_unknown_names_say_did_you_mean() -> None:
    with pytest.raises(UserError, match="did you mean 'gspo'"):
        loss_fn("gpso")
    with pytest.raises(UserError, match="train.aggregation.*did you mean 'token'"):
        aggregate_fn("tokens")
    assert set(IS_CORRECTIONS) == {"tis", "mis", "none"} and set(IS_LEVELS) == {"token", "sequence",
                                                                                "geometric"}


@pytest.mark.parametrize("name", ["ppo_clip", "pg", "cispo", "gspo"])
def test_per_token_advantages_equal_to_the_sequences_give_the_same_loss(name: str) -> None:
    logp, old, mask = [[-0.2, -1.0, -0.7]], [[-0.5, -0.9, -0.7]], [[1, 1, 1]]
    fn = LOSSES[name]
    s = LossSettings(clip_low=0.2, clip_high=0.2)
    per_seq, _ = fn(_batch(logp, old, [1.5], mask), s)
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    per_tok, _ = fn(TokenBatch(logp=t(logp), old_logp=t(old), advantages=t([[1.5, 1.5, 1.5]]),
                               mask=t(mask)), s)
    assert per_seq[0].abs().sum() > 0  # a loss that did something
    assert per_tok[0].tolist() == pytest.approx(per_seq[0].tolist())


def test_each_turn_takes_its_own_advantage() -> None:
    # on-policy (ratio 1) the policy gradient's per-token loss is -A_t: each turn's tokens their own A
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    b = TokenBatch(logp=t([[-0.3, -0.4, -0.5, -0.6]]), old_logp=t([[-0.3, -0.4, -0.5, -0.6]]),
                   advantages=t([[0.5, 0.5, -1.0, -1.0]]), mask=t([[1, 1, 1, 1]]))
    loss, _ = LOSSES["pg"](b, LossSettings(clip_low=0.2, clip_high=0.2))
    assert loss[0].tolist() == pytest.approx([-0.5, -0.5, 1.0, 1.0])


def test_turn_baselines_are_refused_with_gspo() -> None:
    from rlvr.config import TrainConfig
    from rlvr.train.update import check_settings

    with pytest.raises(UserError, match="turn_baseline"):
        check_settings(TrainConfig(loss="gspo", turn_baseline=True))
    check_settings(TrainConfig(loss="ppo_clip", turn_baseline=True))
