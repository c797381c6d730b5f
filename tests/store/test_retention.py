"""Which episodes the store keeps."""
from __future__ import annotations

import pytest

from rlvr.rollout.episode import Episode
from rlvr.store.retention import Retention
from rlvr.verify.verdict import Verdict


def ep(passed: bool, i: int, *, masked: bool = False) -> Episode:
    verdict = Verdict.infra("died") if masked else Verdict(score=float(passed), passed=passed)
    return Episode(task_id="t", domain="code", step=i, group_id=f"g{i}", sample_index=i % 8, verdict=verdict,
                   reward=float(passed), status="infra_error" if masked else "done")


def test_failed_retention_is_deterministic_and_near_its_share() -> None:
    keep = Retention(0.3, seed=0)
    failed = [ep(False, i) for i in range(2000)]
    kept = [keep.keep(e) for e in failed]
    assert kept == [Retention(0.3, seed=0).keep(e) for e in failed]
    assert sum(kept) / len(kept) == pytest.approx(0.3, abs=0.04)
    assert kept != [Retention(0.3, seed=1).keep(e) for e in failed]  # the run seed takes part in the draw
    assert all(keep.keep(ep(True, i)) for i in range(50))
    assert all(keep.keep(ep(False, i, masked=True)) for i in range(50))
    assert not Retention(0.0).kept(failed) and Retention(1.0).kept(failed) == failed
