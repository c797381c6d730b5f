"""Tier assignment by pass rate and the tier weights."""
from __future__ import annotations

import pytest

from rlvr.config import ScheduleConfig
from rlvr.schedule.tiers import ALWAYS, LEARNABLE, NEVER, UNSEEN, tier_of, tier_weight


@pytest.mark.parametrize(("rate", "tier"), [
    (None, UNSEEN), (0.0, NEVER), (0.1, NEVER), (0.11, LEARNABLE), (0.5, LEARNABLE), (0.89, LEARNABLE),
    (0.9, ALWAYS), (1.0, ALWAYS),
])
def test_bands_are_inclusive_at_both_edges(rate: float | None, tier: str) -> None:
    cfg = ScheduleConfig(band_low=0.1, band_high=0.9)
    assert tier_of(rate, cfg) == tier


def test_outside_band_tiers_take_the_configured_weight() -> None:
    cfg = ScheduleConfig(outside_band_weight=0.25)
    assert tier_weight(0.0, cfg) == 0.25
    assert tier_weight(1.0, cfg) == 0.25
    assert tier_weight(0.5, cfg) == 1.0
    assert tier_weight(None, cfg) == 1.0


def test_bands_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="band_low must be below band_high"):
        ScheduleConfig(band_low=0.6, band_high=0.4)
