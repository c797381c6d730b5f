"""Batch allocation across domains and weighted draws without replacement."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from rlvr.errors import UserError
from rlvr.schedule.mixing import allocate, weighted_sample


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def test_quotas_come_first_then_weights_by_largest_remainder() -> None:
    rng = _rng(0)
    for _ in range(50):
        got = allocate(10, ["a", "b", "c"], {"a": 3, "b": 1, "c": 0}, {"c": 2}, rng)
        assert got == {"a": 6, "b": 2, "c": 2}


def test_fractional_shares_average_to_the_weights() -> None:
    rng = _rng(1)
    totals = Counter()
    for _ in range(3000):
        got = allocate(1, ["a", "b"], {"a": 2, "b": 1}, {}, rng)
        assert sum(got.values()) == 1
        totals.update(got)
    assert totals["a"] / 3000 == pytest.approx(2 / 3, abs=0.03)


def test_default_weights_are_equal() -> None:
    assert allocate(4, ["a", "b"], {}, {}, _rng(0)) == {"a": 2, "b": 2}


def test_quotas_above_the_batch_are_a_user_error() -> None:
    with pytest.raises(UserError, match=r"\[schedule.quotas\].*more than the batch of 4"):
        allocate(4, ["a", "b"], {}, {"a": 3, "b": 2}, _rng(0))


def test_all_zero_weights_without_full_quotas_is_a_user_error() -> None:
    with pytest.raises(UserError, match="weight 0"):
        allocate(4, ["a"], {"a": 0}, {}, _rng(0))
    assert allocate(2, ["a"], {"a": 0}, {"a": 2}, _rng(0)) == {"a": 2}


def test_weighted_sample_is_distinct_skips_zero_weights_and_follows_weights() -> None:
    rng = _rng(2)
    firsts = Counter()
    for _ in range(4000):
        got = weighted_sample(["x", "y", "z", "never"], [3.0, 1.0, 1.0, 0.0], 3, rng)
        assert sorted(got) == ["x", "y", "z"]
        firsts[got[0]] += 1
    assert firsts["x"] / 4000 == pytest.approx(0.6, abs=0.03)
    assert weighted_sample([1, 2], [0.0, 0.0], 2, rng) == []
    assert weighted_sample([], [], 2, rng) == []


def test_weighted_sample_consumes_one_number_per_item() -> None:
    a, b = _rng(5), _rng(5)
    weighted_sample(list(range(7)), [1.0, 0.0, 2.0, 0.0, 1.0, 1.0, 3.0], 2, a)
    b.random(7)
    assert a.random() == b.random()
