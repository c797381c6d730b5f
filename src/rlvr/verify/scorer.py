"""The Scorer: the one seam between "an episode ended" and "its reward".

    scored = scorer.score(task, final_state, seed)     # -> Scored(verdict, reward)

The rollout engine calls it exactly once per episode, on a worker thread as the episode ends (so scoring
overlaps generation of the others); `rlvr train`, `rlvr eval`, held-out evaluation, `rlvr verify` and the
adapters for other trainers build the same Scorer, so a verdict means the same thing everywhere. It owns:

- **dispatch**: verification runs here (`rlvr.verify.base.verify` with this process's sandbox pool), or on
  the node that runs the candidate when the pool declares it can (a pool that subclasses `RemoteVerifier`,
  the Ray pool): hidden material and the trusted harness then never cross to the candidate's node. Both paths
  hand the verifier the same `VerifyContext` (the seed and the extras, e.g. a preview directory), so a
  verdict replays exactly on either.
- **retries**: a verdict with `infra_error` is retried `retries` times, then returned as it is (the engine
  masks such an episode; it is never scored 0 for training).
- **the verdict cache**: identical final states of the same task are verified once per Scorer. A verdict
  that drew randomness (randomised hidden cases, `Verdict.seed` set) is cached under the seed too, so a hit
  is exactly what verifying again would give; infra errors are never cached.
- **the flag penalty**: the reward of a flagged verdict is `flag_penalty` (default 0), else its score.

Verifiers that draw randomness draw it from the seed they are given (`VerifyContext.seed`), never from the
clock or the OS, so the same (task, final state, seed) gives the same verdict.
"""
from __future__ import annotations

import abc
import hashlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.verdict import Verdict

if TYPE_CHECKING:
    from rlvr.config import RunConfig


class RemoteVerifier(abc.ABC):
    """A sandbox pool that verifies where it runs candidates declares it by subclassing this (explicitly: the
    Scorer never probes a pool for methods)."""

    @abc.abstractmethod
    def verify_remote(self, task: Task, final: FinalState, seed: int, extras: Mapping[str, Any]) -> Verdict:
        """The verdict of `task` on `final`, reached on one of the pool's nodes with this seed and extras."""


@dataclass(frozen=True)
class Scored:
    """What scoring one episode gave."""

    verdict: Verdict
    reward: float
    """The reward for training: the score, or the flag penalty when flagged (0 with an infra error)."""
    attempts: int = 1
    """Verifications run (retries of infra errors included); 0 for a cache hit."""
    seconds: float = 0.0

    @property
    def cached(self) -> bool:
        return self.attempts == 0

    @property
    def infra_error(self) -> str | None:
        return self.verdict.infra_error


class VerdictCache:
    """Verdicts of identical final states of the same task (and, for verdicts that drew randomness, the same
    seed), kept for the life of one Scorer. Thread-safe: the engine scores on several worker threads."""

    def __init__(self) -> None:
        self._verdicts: dict[str, Verdict] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(task: Task, final: FinalState, seed: int | None = None) -> str:
        h = hashlib.sha256()
        h.update(task.model_dump_json().encode())
        h.update(final.model_dump_json().encode())
        if seed is not None:
            h.update(f"|seed={seed}".encode())
        return h.hexdigest()

    def get(self, task: Task, final: FinalState, seed: int) -> Verdict | None:
        with self._lock:
            v = self._verdicts.get(self.key(task, final)) or self._verdicts.get(self.key(task, final, seed))
            if v is None:
                self.misses += 1
            else:
                self.hits += 1
            return v

    def put(self, task: Task, final: FinalState, seed: int, verdict: Verdict) -> None:
        if verdict.infra_error is not None:
            return
        with self._lock:
            self._verdicts[self.key(task, final, None if verdict.seed is None else seed)] = verdict

    def __len__(self) -> int:
        return len(self._verdicts)


class Scorer:
    """Scores final states of tasks: verification (local or remote), retries, the verdict cache and the flag
    penalty. One per run (or per evaluation); safe to call from several threads."""

    def __init__(self, pool: SandboxPool | None = None, *, retries: int = 1, flag_penalty: float = 0.0,
                 cache: bool = True, extras: Mapping[str, Any] | None = None) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.pool = pool
        self.retries = retries
        self.flag_penalty = flag_penalty
        self.extras: dict[str, Any] = dict(extras or {})
        self.cache = VerdictCache() if cache else None
        self.remote = pool if isinstance(pool, RemoteVerifier) else None
        """Set when verification runs on the pool's nodes rather than in this process."""

    @classmethod
    def from_config(cls, cfg: RunConfig, pool: SandboxPool | None, **extras: Any) -> Scorer:
        """The Scorer of a run: `rollout.infra_retries` retries, `train.flag_penalty`, a verdict cache."""
        return cls(pool, retries=cfg.rollout.infra_retries, flag_penalty=cfg.train.flag_penalty, extras=extras)

    def score(self, task: Task, final: FinalState, seed: int = 0) -> Scored:
        """The verdict and reward of `final` as the end state of `task`; never raises for an infra fault."""
        t0 = time.perf_counter()
        hit = self.cache.get(task, final, seed) if self.cache is not None else None
        if hit is not None:
            return Scored(hit, self.reward(hit), attempts=0, seconds=time.perf_counter() - t0)
        attempts = 0
        while True:
            attempts += 1
            verdict = self._verify_once(task, final, seed)
            if verdict.infra_error is None or attempts > self.retries:
                break
        if self.cache is not None:
            self.cache.put(task, final, seed, verdict)
        return Scored(verdict, self.reward(verdict), attempts=attempts, seconds=time.perf_counter() - t0)

    def reward(self, verdict: Verdict) -> float:
        """The training reward of a verdict: 0 for an infra error (the episode is masked anyway), the flag
        penalty when flagged, else the score."""
        return 0.0 if verdict.infra_error is not None else verdict.reward(self.flag_penalty)

    def _verify_once(self, task: Task, final: FinalState, seed: int) -> Verdict:
        if self.remote is not None:
            return self.remote.verify_remote(task, final, seed, self.extras)
        return verify(task, final, VerifyContext(pool=self.pool, seed=seed, extras=dict(self.extras)))
