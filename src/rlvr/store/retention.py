"""Which episodes the store keeps: every passed and every masked one, failed ones at
`schedule.failed_retention`.

The draw hashes the episode's identity (run, step, task, group, sample, seed) with the run seed, so a replay
keeps the same episodes and it takes nothing from any sampling stream.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from rlvr.rollout.episode import Episode


@dataclass(frozen=True)
class Retention:
    """The keep rule of one run."""

    failed_share: float = 1.0
    """Share of failed, judged episodes kept (1: all)."""
    seed: int = 0

    def keep(self, episode: Episode) -> bool:
        """Whether the store keeps this episode."""
        if episode.passed or episode.masked or self.failed_share >= 1.0:
            return True
        ident = f"{self.seed}|{episode.run_id}|{episode.step}|{episode.domain}/{episode.task_id}|" \
                f"{episode.group_id}|{episode.sample_index}|{episode.seed}"
        u = int.from_bytes(hashlib.blake2b(ident.encode(), digest_size=8).digest(), "big") / 2**64
        return u < self.failed_share

    def kept(self, episodes: list[Episode]) -> list[Episode]:
        return [ep for ep in episodes if self.keep(ep)]
