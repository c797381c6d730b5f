"""Advantage estimators of the GRPO family, as a table of named functions over one group's rewards."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rlvr.errors import UserError
from rlvr.rollout.core.groups import groups, is_zero_variance
from rlvr.rollout.episode import Episode

AdvantageFn = Callable[[Sequence[float]], list[float]]
"""Rewards of one group (the samples of one task) -> one advantage per sample."""

_STD_EPS = 1e-4
"""Added to the group std so that a group with a tiny spread cannot blow advantages up (as in TRL)."""


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def grpo(rewards: Sequence[float]) -> list[float]:
    """GRPO (DeepSeekMath): (r - group mean) / (group std + eps), with the unbiased std as TRL computes it."""
    n = len(rewards)
    if n == 0 or is_zero_variance(rewards):
        return [0.0] * n
    m = _mean(rewards)
    std = math.sqrt(sum((r - m) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    return [(r - m) / (std + _STD_EPS) for r in rewards]


def dr_grpo(rewards: Sequence[float]) -> list[float]:
    """Dr. GRPO (Liu et al. 2025): r - group mean, no std normalisation (its length part is the loss's
    `constant` aggregation)."""
    if not rewards or is_zero_variance(rewards):
        return [0.0] * len(rewards)
    m = _mean(rewards)
    return [r - m for r in rewards]


def rloo(rewards: Sequence[float]) -> list[float]:
    """RLOO (Ahmadian et al. 2024): r_i minus the mean of the other samples of the group."""
    n = len(rewards)
    if n < 2 or is_zero_variance(rewards):
        return [0.0] * n  # no other sample to compare with, or nothing to prefer: no signal
    total = sum(rewards)
    return [r - (total - r) / (n - 1) for r in rewards]


ADVANTAGES: dict[str, AdvantageFn] = {"grpo": grpo, "dr_grpo": dr_grpo, "rloo": rloo}
"""Estimator name (`train.advantage`) -> function."""


def estimator(name: str) -> AdvantageFn:
    """The estimator called `name`; an unknown name is a UserError listing the known ones."""
    if name not in ADVANTAGES:
        raise UserError(f"unknown advantage estimator {name!r}", field="train.advantage",
                        fix=f"use one of {', '.join(sorted(ADVANTAGES))}")
    return ADVANTAGES[name]


def episode_advantages(episodes: Sequence[Episode], name: str) -> dict[str, float]:
    """Advantage per episode id, computed within each group (rlvr.rollout.core.groups) over its unmasked
    episodes.

    Masked episodes (infra faults) get no advantage: they are left out of the update, never scored 0.
    """
    fn = estimator(name)
    out: dict[str, float] = {}
    for members in groups(episodes).values():
        for ep, adv in zip(members, fn([ep.reward for ep in members]), strict=True):
            out[ep.episode_id] = adv
    return out
