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


def turn_spans(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    """The generated turns of a token record: each maximal run of loss-carrying positions, as [start, end)."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, m in enumerate(loss_mask):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(loss_mask)))
    return spans


def turn_advantages(episodes: Sequence[Episode], name: str,
                    first: dict[str, float]) -> dict[str, list[float]]:
    """Advantage per episode id and turn (`train.turn_baseline`): within each group, the tokens of turn k are
    compared only with the group's episodes that reached turn k, so turn k's baseline is what the
    policy earns from there on. Turn 1 is the whole group's: `first`, the step's `episode_advantages`.

    Why: a multi-turn episode reaches turn k only when its earlier turns did not end it (an attempt that
    passed ends the episode), so the episodes that hold a later turn are, as a set, below the group's mean.
    Against the whole group's baseline every later-turn token of such a group is pushed down on average, and
    on a policy that is near-deterministic on most of those tokens the sampled estimate of that push does not
    cancel: the later turns drift to high entropy. Against the turn's own baseline the later turns' advantages
    sum to zero as the first turn's do. The baseline depends only on what happened before turn k (whether the
    episode got there), never on the turn's own tokens, so the gradient stays unbiased.

    An episode whose record started over (`metadata["segments"]`) keeps its episode advantage alone (its
    turns cannot be counted from one record; `update.samples_from` gives a turn past the list's end its last
    entry). A turn only one episode of its group reached gets 0 (no other to compare with)."""
    fn = estimator(name)
    out = {eid: [adv] for eid, adv in first.items()}
    for members in groups(episodes).values():
        counted = [ep for ep in members if not ep.metadata.get("segments")]
        turns = {ep.episode_id: len(turn_spans(ep.loss_mask)) for ep in counted}
        for k in range(2, max(turns.values(), default=0) + 1):
            reached = [ep for ep in counted if turns[ep.episode_id] >= k]
            advs = fn([ep.reward for ep in reached]) if len(reached) > 1 else [0.0]
            for ep, adv in zip(reached, advs, strict=True):
                out[ep.episode_id].append(adv)
    return out


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
