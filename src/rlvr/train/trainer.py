"""The typed trainer: everything a training run holds while it trains, as one record the loop reads.

`rlvr.run.build_trainer` assembles it from the run's config sections (the one place that maps sections to
constructors); the loop (`rlvr.train.loop`) drives it. What only training needs beside the parts every run has
(pool, Scorer, policy, rollout driver): the scheduler, the updater, the store, the monitor, the held-out set,
the checkpoints, the recovery mixer and this process's rank.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rlvr.config import RunConfig
from rlvr.rollout.core.rollouts import Progress, Rollouts
from rlvr.rollout.episode import Episode
from rlvr.rollout.policies.trainable import TrainablePolicy
from rlvr.rollout.policies.weights import sync_generation
from rlvr.rollout.policy import Policy, SamplingParams
from rlvr.sandbox.base import SandboxPool
from rlvr.schedule.scheduler import Scheduler
from rlvr.store.episodes import EpisodeStore
from rlvr.store.retention import Retention
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task
from rlvr.train import distributed
from rlvr.train.distributed import SINGLE, Dist
from rlvr.train.distributed.engines import EngineSync
from rlvr.train.sft import encoded, warm_start_examples
from rlvr.train.truncation import Truncation
from rlvr.train.update import PolicyUpdater
from rlvr.verify.scorer import Scorer

if TYPE_CHECKING:
    from rlvr.monitor.monitor import Monitor
    from rlvr.train.checkpoint import Checkpoints
    from rlvr.train.display import TrainDisplay
    from rlvr.train.recovery import RecoveryMixer


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS has one, else the machine's count)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return max(len(affinity(0)) if affinity else (os.cpu_count() or 1), 1)


class NoMonitor:
    """The monitor of a rank other than 0: rank 0 logs every episode of the step."""

    def log(self, step: int, episodes: list[Episode], extra: dict[str, float] | None = None) -> dict[str,
                                                                                                     float]:
        return {}

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class Heldout:
    """The run's held-out set: measured before and after RL, never trained on."""

    tasks: list[Task]
    spec: str
    """The tasks SPEC it was read from (`tasks.heldout`, or the default of the training domains)."""

    @property
    def keys(self) -> set[str]:
        return {t.key for t in self.tasks}


@dataclass
class Trainer:
    """Everything a run holds while it trains (see the module docstring)."""

    cfg: RunConfig
    run_url: str
    """Where the run's records and checkpoints live (`store.url`, else the run directory)."""
    policy: TrainablePolicy
    """The policy being trained (its `.model` is updated in place)."""
    pool: SandboxPool
    scorer: Scorer
    """The run's one scoring seam: rollouts, held-out evaluation and every verdict of the run use it."""
    rollouts: Rollouts
    """Who plays the episodes: the built-in env loop, or the run's agent through the gateway (`[agent]
    command`), chosen once by the run builder."""
    gold: Callable[[Policy], Rollouts]
    """`gold(policy)`: the env loop on a gold policy that plays reference solutions (`rlvr.run.Run.gold`)."""
    scheduler: Scheduler
    updater: PolicyUpdater
    store: EpisodeStore
    retention: Retention
    """Which episodes the store keeps."""
    monitor: Monitor | NoMonitor
    checkpoints: Checkpoints
    train_sources: list[TaskSource]
    heldout: Heldout
    display: TrainDisplay | None = None
    dist: Dist = SINGLE
    """This process's rank in the job; only rank 0 samples, stores, monitors and evaluates."""
    recovery: RecoveryMixer | None = None
    """Recovery samples from the run's failures, every `sft.recovery_every` steps (`rlvr.train.recovery`)."""
    truncation: Truncation = field(default_factory=Truncation)
    """What a truncated episode teaches the update (`train.truncation`, rlvr.train.truncation)."""
    engines: EngineSync | None = None
    """Engine actors with several ranks: every rank's part in feeding them
    (rlvr.train.distributed.engines)."""

    def rollouts_with(self, sampling: SamplingParams, progress: Progress | None = None) -> Rollouts:
        """The run's rollouts sampling with `sampling` (held-out evaluation's sampled and greedy passes)."""
        return self.rollouts.with_sampling(sampling, progress=progress)

    def gold_rollouts(self, policy: Policy) -> Rollouts:
        """The run's env loop on a gold policy (`rlvr.rollout.policies.gold`): its turns are given, never cut
        but by the task's own budget."""
        return self.gold(policy)

    def sft_examples(self) -> list[Any]:
        """The SFT warm start's examples (`sft.source`), never a held-out task, encoded as token records. With
        several ranks rank 0 makes them (gold trajectories are played once, in one sandbox fleet) and every
        rank trains on its copy: the same examples in the same order, whatever the source, so N ranks train
        what one rank trains."""
        examples: list[Any] | None = None
        if self.dist.main:
            made = warm_start_examples(self.cfg.sft, self.train_sources, self.gold_rollouts, self.policy,
                                       seed=self.cfg.seed,
                                       limit_index=self.cfg.tasks.heldout_offset, exclude=self.heldout.keys)
            examples = encoded(self.policy, made)
        return self.dist.broadcast(examples)

    def sync_generation(self) -> float | None:
        """Bring the generation weights up to the trainer's when behind (seconds; None: nothing moved). With
        several ranks the sharded weights are gathered into every rank's full copy (with engine actors, into
        rank 0's, which syncs the engines from it): a collective."""
        policy = self.policy
        # several ranks, engine actors: rank 0 syncs them from the gathered weights
        if self.engines is not None:
            return self.engines.sync(policy)
        if not self.dist.active or policy.generation_version == policy.version:
            return sync_generation(policy)
        t0 = time.perf_counter()
        policy.sync_weights(distributed.full_weights(policy.model), policy.version)
        return time.perf_counter() - t0

    def training_threads(self, beside_rollout: bool = False) -> int:
        """torch CPU threads for the trainer's compute (`train.threads`; unset: every CPU this process may use
        on one rank, `policy.threads` on several or when a rollout runs `beside_rollout`)."""
        if self.cfg.train.threads:
            return self.cfg.train.threads
        if self.dist.active or beside_rollout:
            return self.cfg.policy.threads
        return usable_cpus()

    @contextmanager
    def training(self, beside_rollout: bool = False) -> Iterator[None]:
        """Run the block with `training_threads(beside_rollout)` torch threads, then restore the rollout's."""
        before = torch.get_num_threads()
        torch.set_num_threads(self.training_threads(beside_rollout))
        try:
            yield
        finally:
            torch.set_num_threads(before)


def fleet_metrics(pool: Any) -> dict[str, float]:
    """The sandbox fleet's size and history when it is on Ray (`cluster/workers`, `cluster/draining`,
    `cluster/replaced`, `cluster/asked`: workers asked of the autoscaler); nothing for a local pool."""
    stats = getattr(pool, "stats", None)
    if stats is None or not hasattr(pool, "events"):
        return {}
    s = stats()
    return {"cluster/workers": float(s["actors"]), "cluster/draining": float(s["draining"]),
            "cluster/replaced": float(s["replaced"]), "cluster/asked": float(s["asked"])}
