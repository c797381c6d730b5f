"""Domain mixing: how many tasks of a batch each domain gets, and weighted draws without replacement."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlvr.errors import UserError


def allocate(batch_size: int, names: Sequence[str], weights: Mapping[str, float], quotas: Mapping[str, int],
             rng: np.random.Generator) -> dict[str, int]:
    """Split `batch_size` tasks across `names`: each gets its quota first, the rest goes by weight.

    The weighted part is apportioned by largest remainder, and the leftover slots are drawn at random in
    proportion to the fractional parts, so a 3:1 mix of a batch of 4 is always 3 and 1, and the long-run
    shares equal the weights exactly.
    """
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    counts = {n: int(quotas.get(n, 0)) for n in names}
    fixed = sum(counts.values())
    if fixed > batch_size:
        raise UserError(f"domain quotas add up to {fixed}, more than the batch of {batch_size}",
                        field="schedule.quotas", fix="lower the quotas or raise train.batch_size")
    rest = batch_size - fixed
    w = {n: float(weights.get(n, 1.0)) for n in names}
    total = sum(w.values())
    if rest == 0:
        return counts
    if total <= 0:
        raise UserError("every domain has weight 0 and the quotas do not fill the batch",
                        field="schedule.weights",
                        fix="give at least one domain a positive weight")
    exact = {n: rest * w[n] / total for n in names}
    for n in names:
        counts[n] += math.floor(exact[n])
    left = batch_size - sum(counts.values())
    fractions = {n: exact[n] - math.floor(exact[n]) for n in names}
    for n in weighted_sample([n for n in names if fractions[n] > 0],
                             [fractions[n] for n in names if fractions[n] > 0],
                             left, rng):
        counts[n] += 1
    return counts


def weighted_sample(items: Sequence[Any], weights: Sequence[float] | np.ndarray, k: int,
                    rng: np.random.Generator) -> list[Any]:
    """Up to `k` distinct items drawn with probability proportional to weight, without replacement.

    Efraimidis–Spirakis keys (log(u) / w, largest k), vectorised: one random number per item, so the stream
    advances by exactly `len(items)` numbers whatever the weights. Items of weight 0 are never drawn.
    """
    if k <= 0 or len(items) == 0:
        return []
    w = np.asarray(weights, dtype=np.float64)
    u = rng.random(len(w))
    live = w > 0
    m = int(live.sum())
    if m == 0:
        return []
    keys = np.full(len(w), -np.inf)
    keys[live] = np.log(np.maximum(u[live], np.finfo(np.float64).tiny)) / w[live]
    k = min(k, m)
    top = np.argpartition(-keys, k - 1)[:k]
    top = top[np.argsort(-keys[top], kind="stable")]
    return [items[int(i)] for i in top]
