"""Difficulty tiers by pass rate: the table that decides how often a task is practised."""
from __future__ import annotations

from collections.abc import Callable

from rlvr.config import ScheduleConfig

UNSEEN = "unseen"
NEVER = "never"
LEARNABLE = "learnable"
ALWAYS = "always"

TIER_NAMES: tuple[str, ...] = (UNSEEN, NEVER, LEARNABLE, ALWAYS)
"""Every tier, in the order reports list them."""

TIER_WEIGHTS: dict[str, Callable[[ScheduleConfig], float]] = {
    UNSEEN: lambda cfg: 1.0,
    NEVER: lambda cfg: cfg.outside_band_weight,
    LEARNABLE: lambda cfg: 1.0,
    ALWAYS: lambda cfg: cfg.outside_band_weight,
}
"""Relative sampling weight of a task in each tier. Unseen tasks weigh as much as learnable ones, since a task
must be tried before it can be placed."""


def tier_of(rate: float | None, cfg: ScheduleConfig) -> str:
    """The tier of a task with pass rate `rate` (None: never observed) under the config's bands."""
    if rate is None:
        return UNSEEN
    if rate <= cfg.band_low:
        return NEVER
    if rate >= cfg.band_high:
        return ALWAYS
    return LEARNABLE


def tier_weight(rate: float | None, cfg: ScheduleConfig) -> float:
    """Sampling weight of a task with pass rate `rate`."""
    return TIER_WEIGHTS[tier_of(rate, cfg)](cfg)
