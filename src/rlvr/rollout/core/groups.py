"""GRPO groups, defined once: which episodes form a group, and when a group carries no learning signal.

A group is the `group_size` samples of one task in one step; every rollout driver gives them one `group_id`.
Records from elsewhere (an imported dataset, a test) may lack it: they are grouped by step and task. Episodes
masked by an infra fault belong to their group but have no reward to compare, so every rule below reads only
the unmasked ones.

A group has zero variance when it has at least one unmasked episode and all its unmasked rewards are equal
within `ZERO_VARIANCE_TOL` (a group of one included: it has nothing to compare against). A group whose every
episode was masked is masked, not uninformative, and is never listed as zero-variance.

Users: the update leaves zero-variance groups out (rlvr.train), the scheduler and the monitor count them
(they only observe), and the advantages are computed within groups (rlvr.train.advantages).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from rlvr.rollout.episode import Episode

ZERO_VARIANCE_TOL = 1e-9
"""Rewards closer than this count as equal."""


def group_key(ep: Episode) -> str:
    """The group an episode belongs to: its group id, else its step and task."""
    return ep.group_id or f"{ep.step}:{ep.domain}/{ep.task_id}"


def groups(episodes: Iterable[Episode]) -> dict[str, list[Episode]]:
    """Group key -> the group's unmasked episodes, in order (a group with only masked ones maps to [])."""
    out: dict[str, list[Episode]] = {}
    for ep in episodes:
        members = out.setdefault(group_key(ep), [])
        if not ep.masked:
            members.append(ep)
    return out


def group_rewards(episodes: Iterable[Episode]) -> dict[str, list[float]]:
    """Group key -> rewards of its unmasked episodes."""
    return {k: [float(ep.reward) for ep in members] for k, members in groups(episodes).items()}


def is_zero_variance(rewards: Sequence[float]) -> bool:
    """The one zero-variance rule (see the module docstring)."""
    return bool(rewards) and max(rewards) - min(rewards) <= ZERO_VARIANCE_TOL


def zero_variance_groups(episodes: Iterable[Episode]) -> list[str]:
    """Keys of the zero-variance groups, in first-seen order."""
    return [k for k, rewards in group_rewards(episodes).items() if is_zero_variance(rewards)]


def reward_variance(rewards: Sequence[float]) -> float:
    """Population variance in plain floats (statistics.pvariance is exact but far slower, via fractions)."""
    mean = sum(rewards) / len(rewards)
    return sum((r - mean) ** 2 for r in rewards) / len(rewards)
