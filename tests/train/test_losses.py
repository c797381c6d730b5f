"""Losses and aggregations against hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch

from rlvr.errors import UserError
from rlvr.train.losses import (
    AGGREGATIONS,
    LOSSES,
    BatchTotals,
    LossSettings,
    TokenBatch,
    aggregate_fn,
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
