"""The Scorer: the one seam between "an episode ended" and "its reward".

    scored = scorer.score(task, final_state, seed)     # -> Scored(verdict, reward)

Every rollout driver calls it exactly once per episode, on a worker thread as the episode ends (so scoring
overlaps generation of the others); `rlvr train`, `rlvr eval`, held-out evaluation, `rlvr verify` and the
adapters for other trainers build the same Scorer, so a verdict means the same thing everywhere. It owns:

- **dispatch**: verification runs here (`rlvr.verify.base.verify` with this process's sandbox pool), or on
  the node that runs the candidate when the pool declares it can (a pool that subclasses `RemoteVerifier`,
  the Ray pool): hidden material and the trusted harness then never cross to the candidate's node. Both paths
  hand the verifier the same `VerifyContext` (the seed and the extras, e.g. a preview directory), so a
  verdict replays exactly on either.
- **retries**: a verdict with `infra_error` is retried `retries` times, then returned as it is (the rollouts
  masks such an episode; it is never scored 0 for training).
- **the verdict cache**: identical final states of the same task are verified once per Scorer (the most
  recent 20,000 kept). A verdict that drew randomness (randomised hidden cases, fresh inputs: `Verdict.seed`
  set) is cached under the seed too, so a hit is exactly what verifying again would give; infra errors are
  never cached. The rollouts verify every sample of a GRPO group with the group's seed
  (`rlvr.rollout.core.rollouts.verify_seed`), so a group's identical answers share one verification, and its
  samples are judged on the same fresh inputs.
- **the flag penalty**: the reward of a flagged verdict is `flag_penalty` (default 0), else its score.

Verifiers that draw randomness draw it from the seed they are given (`VerifyContext.seed`), never from the
clock or the OS, so the same (task, final state, seed) gives the same verdict.
"""
from __future__ import annotations

import abc
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.verdict import Verdict


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
    seed), kept for the life of one Scorer, the `max_entries` most recently used. Thread-safe: the env loop
    scores on several worker threads, and a state already being verified on one of them is waited for, not
    verified twice (`claim` / `release`): identical answers of one GRPO group, scored at once, cost one
    verification."""

    def __init__(self, max_entries: int = 20_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._verdicts: OrderedDict[str, Verdict] = OrderedDict()
        self._inflight: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def keys(task: Task, final: FinalState, seed: int) -> tuple[str, str]:
        """(the state's key, the state's key under `seed`): the task and the state are serialised and hashed
        once."""
        h = hashlib.sha256()
        h.update(task.model_dump_json().encode())
        h.update(final.model_dump_json().encode())
        seeded = h.copy()
        seeded.update(f"|seed={seed}".encode())
        return h.hexdigest(), seeded.hexdigest()

    def _lookup(self, keys: tuple[str, str]) -> Verdict | None:
        for k in keys:
            v = self._verdicts.get(k)
            if v is not None:
                self._verdicts.move_to_end(k)
                return v
        return None

    def claim(self, task: Task, final: FinalState, seed: int) -> tuple[Verdict | None,
                                                                       tuple[str, str] | None]:
        """A cached verdict and None, or None and a claim on verifying this state (its keys): the caller
        verifies and then calls `release` with the claim. While a claim is out, the same request waits for its
        release."""
        keys = self.keys(task, final, seed)
        while True:
            with self._lock:
                v = self._lookup(keys)
                if v is not None:
                    self.hits += 1
                    return v, None
                pending = self._inflight.get(keys[1])
                if pending is None:
                    self._inflight[keys[1]] = threading.Event()
                    self.misses += 1
                    return None, keys
            pending.wait()  # then look again: an infra error is not cached, and this caller verifies itself

    def release(self, claim: tuple[str, str], verdict: Verdict | None) -> None:
        """Store the claimed verification's verdict (None: it raised) and wake the callers waiting for it."""
        try:
            if verdict is not None:
                self._store(claim, verdict)
        finally:
            with self._lock:
                event = self._inflight.pop(claim[1], None)
            if event is not None:
                event.set()

    def get(self, task: Task, final: FinalState, seed: int) -> Verdict | None:
        keys = self.keys(task, final, seed)
        with self._lock:
            v = self._lookup(keys)
            if v is None:
                self.misses += 1
            else:
                self.hits += 1
            return v

    def put(self, task: Task, final: FinalState, seed: int, verdict: Verdict) -> None:
        self._store(self.keys(task, final, seed), verdict)

    def _store(self, keys: tuple[str, str], verdict: Verdict) -> None:
        """Keep a verdict under the seeded key when it drew randomness, else under the state's (infra errors
        never), dropping the least recently used beyond `max_entries`."""
        if verdict.infra_error is not None:
            return
        key = keys[0] if verdict.seed is None else keys[1]
        with self._lock:
            self._verdicts[key] = verdict
            self._verdicts.move_to_end(key)
            while len(self._verdicts) > self.max_entries:
                self._verdicts.popitem(last=False)

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

    def score(self, task: Task, final: FinalState, seed: int = 0) -> Scored:
        """The verdict and reward of `final` as the end state of `task`; never raises for an infra fault."""
        t0 = time.perf_counter()
        claim = None
        if self.cache is not None:
            hit, claim = self.cache.claim(task, final, seed)
            if hit is not None:
                return Scored(hit, self.reward(hit), attempts=0, seconds=time.perf_counter() - t0)
        verdict: Verdict | None = None
        attempts = 0
        try:
            while True:
                attempts += 1
                verdict = self._verify_once(task, final, seed)
                if verdict.infra_error is None or attempts > self.retries:
                    break
        finally:
            if self.cache is not None and claim is not None:
                self.cache.release(claim, verdict)
        assert verdict is not None
        return Scored(verdict, self.reward(verdict), attempts=attempts, seconds=time.perf_counter() - t0)

    def reward(self, verdict: Verdict) -> float:
        """The training reward of a verdict: 0 for an infra error (the episode is masked anyway), the flag
        penalty when flagged, else the score."""
        return 0.0 if verdict.infra_error is not None else verdict.reward(self.flag_penalty)

    def _verify_once(self, task: Task, final: FinalState, seed: int) -> Verdict:
        if self.remote is not None:
            return self.remote.verify_remote(task, final, seed, self.extras)
        return verify(task, final, VerifyContext(pool=self.pool, seed=seed, extras=dict(self.extras)))
