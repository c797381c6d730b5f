"""What a truncated episode teaches: the run's choice (`train.truncation`), applied before advantages.

An episode cut by a budget (turns, tokens, wall, context: `Episode.truncated_by`) is not a clean failure. The
run chooses what it is:

- `score`: its verdict as it stands (the work done when the budget ran out);
- `mask`: nothing, left out of the update and of its group's baseline as an infra fault is (DAPO's "overlong
  filtering");
- `overlong`: its verdict plus DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13): with the
  episode's token budget L_max and a buffer L_cache, a length |y| <= L_max - L_cache costs nothing, one
  inside the buffer costs ((L_max - L_cache) - |y|) / L_cache, linearly down to -1 at L_max, and one cut by
  the token budget costs the whole penalty. Like DAPO it applies to every episode by its length, cut or not.

The stored episodes keep their verdict's reward: only the update sees the shaped one. The monitor charts the
truncated share per budget (`rlvr.monitor.metrics.truncation_metrics`) and alerts when one climbs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlvr.rollout.episode import TOKEN_BUDGET, Episode

__all__ = ["Truncation", "overlong_penalty"]


@dataclass(frozen=True)
class Truncation:
    """The run's choice for truncated episodes (`[train]` truncation, overlong_buffer, overlong_penalty)."""

    mode: str = "score"
    """`score`, `mask` or `overlong` (module docstring)."""
    buffer: float = 0.2
    """Share of the token budget over which the overlong penalty ramps (DAPO: L_cache / L_max)."""
    penalty: float = 1.0
    """The largest overlong penalty (DAPO: 1)."""

    def apply(self, episodes: Sequence[Episode]) -> tuple[list[Episode], dict[str, float]]:
        """The episodes the update learns from, with the rewards it learns (copies where shaped), and
        `truncation/*` counts of what was done."""
        cut = [ep for ep in episodes if ep.status == "truncated" and not ep.masked]
        if self.mode == "mask":
            kept = [ep for ep in episodes if ep.status != "truncated"]
            return kept, {"truncation/masked": float(len(cut))}
        if self.mode == "overlong":
            shaped, total = [], 0.0
            for ep in episodes:
                cost = 0.0 if ep.masked else overlong_penalty(ep, self.buffer, self.penalty)
                total += cost
                shaped.append(ep.model_copy(update={"reward": ep.reward - cost}) if cost else ep)
            judged = sum(not ep.masked for ep in episodes)
            return shaped, {"truncation/overlong_penalty_mean": total / judged if judged else 0.0}
        return list(episodes), {"truncation/scored": float(len(cut))}


def overlong_penalty(ep: Episode, buffer: float, penalty: float) -> float:
    """DAPO's soft overlong punishment of `ep`, as a positive cost in [0, `penalty`]. An episode that records
    no token budget costs the whole penalty when the token budget cut it, else nothing."""
    if ep.truncated_by == "tokens":
        return penalty
    budget = ep.metadata.get(TOKEN_BUDGET)
    if not budget:
        return 0.0
    width = max(1.0, buffer * budget)
    into = ep.num_generated_tokens - (budget - width)
    return penalty * min(1.0, max(0.0, into / width))
