"""The feed: where a training step's episodes come from: generated in the step (synchronous), or ahead of it
(asynchronous mode, `train.max_staleness = k >= 1`). Synchronous rollouts also run on several ranks: rank 0's
batch is broadcast, each rank runs a contiguous share of its groups, and rank 0 gathers every episode
(rlvr.train.distributed); with engine actors on several ranks rank 0 runs them all through the engines.

Asynchronous mode is a fixed-lag pipeline that overlaps generation with the update. A background thread
runs the rollouts in step order while the trainer updates; the policy generates from its own copy of the
weights (`separate_weights()`: the vllm engine, or a copy for the hf backend). After the update of step s
the trainer publishes a snapshot of its weights W(s+1); the rollout of step s loads W(max(start, s - k))
into the generation copy before it starts (waiting for that snapshot if it is not published yet), and the
copy does not change during a rollout. So every rollout of step s >= k is sampled with weights exactly k
updates old, whatever the timing: an asynchronous run is as reproducible as a synchronous one, and every
episode records the version that sampled it (`Episode.policy_version`). The loop still checks the bound and
leaves out any group that would break it (`train/stale_groups`, never silently).

Batches are always sampled by the trainer's thread, in step order, so the scheduler is never touched from
two threads; the batches of steps sampled but not yet trained are saved with each checkpoint and a resumed
run generates exactly those batches again, from the checkpoint's weights (the weights k updates older are
not kept): a resumed asynchronous run is at the right step and trains on the same tasks, but its first k
steps are on-policy, so it is not bit-identical to an uninterrupted one.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from rlvr.rollout.core.rollouts import RolloutStats
from rlvr.rollout.episode import Episode
from rlvr.rollout.policies.weights import snapshot
from rlvr.tasks.spec import Task

if TYPE_CHECKING:
    from rlvr.train.trainer import Trainer


class SyncFeed(AbstractContextManager):
    """The rollout of a step runs in the step, with the weights being trained (staleness 0)."""

    def __init__(self, trainer: Trainer, seed_of: Callable[[int], int]) -> None:
        self.trainer = trainer
        self.seed_of = seed_of

    def sample(self, step: int) -> list[Task]:
        """The step's batch, decided by the scheduler (rank 0's, sent to every rank)."""
        dist = self.trainer.dist
        batch = self.trainer.scheduler.sample(self.trainer.cfg.train.batch_size) if dist.main else None
        return dist.broadcast(batch)

    def run(self, step: int, batch: list[Task]) -> tuple[list[Episode], dict[str, float]]:
        """The batch's rollout, every episode scored as it ends; (episodes, rollout metrics). With several
        ranks each runs a contiguous share of the groups and rank 0 gets every episode, in batch order (the
        other ranks get their own)."""
        rollouts, dist = self.trainer.rollouts, self.trainer.dist
        share = dist.share(len(batch))
        repeats = batch_repeats(batch)  # seeds and group ids count a task's earlier copies in the whole batch
        episodes = rollouts.run([batch[i] for i in share], self.trainer.cfg.rollout.group_size, step=step,
                                seed=self.seed_of(step), repeats=[repeats[i] for i in share])
        if not dist.active:
            return episodes, rollouts.stats.as_metrics()
        gathered = dist.gather((episodes, rollouts.stats))
        if gathered is None:
            return episodes, {}
        return [ep for eps,
                _ in gathered for ep in eps], RolloutStats.merged([st for _, st in gathered]).as_metrics()

    def publish(self, done: int) -> dict[str, float]:
        """After an update: hand changed weights to a generation copy (vllm; every rank's full copy)."""
        synced = self.trainer.sync_generation()
        return {} if synced is None else {"weight_sync/seconds": synced}

    def idle(self) -> AbstractContextManager:
        return contextlib.nullcontext()

    def pending(self) -> dict[int, list[str]]:
        return {}

    def __exit__(self, *exc: object) -> None:
        return None


def batch_repeats(batch: list[Task]) -> list[int]:
    """For each task of a batch, how many times it came earlier in the batch."""
    seen: dict[str, int] = {}
    out = []
    for task in batch:
        out.append(seen.get(task.key, 0))
        seen[task.key] = out[-1] + 1
    return out


class AheadFeed(AbstractContextManager):
    """Rollouts of up to `ahead` future steps run on a background thread while the trainer updates."""

    def __init__(self, trainer: Trainer, seed_of: Callable[[int], int], ahead: int, start: int,
                 pending: dict[int, list[str]] | None = None) -> None:
        self.trainer = trainer
        self.seed_of = seed_of
        self.ahead = ahead
        self.start = start
        self.batches: dict[int, list[Task]] = {int(s): [Task.model_validate_json(t) for t in tasks]
                                               for s, tasks in (pending or {}).items()}
        """Batches sampled (or restored) and not yet trained, by step."""
        self.futures: dict[int, Future] = {}
        self.snapshots: dict[int, tuple[int, list[tuple[str, Any]]]] = {}
        """Published weights by number of steps done: (policy version, (name, tensor) pairs)."""
        self.cond = threading.Condition()
        self.closing = False
        self.running = threading.Lock()
        """Held for a whole rollout; `idle()` holds it to keep the generation copy for itself."""
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="rlvr-rollout-ahead")
        self.publish(start)

    def publish(self, done: int) -> dict[str, float]:
        """The trainer's weights after `done` steps, for the rollout that will need them."""
        t0 = time.perf_counter()
        pairs = snapshot(self.trainer.policy.model)
        with self.cond:
            self.snapshots[done] = (self.trainer.policy.version, pairs)
            self.cond.notify_all()
        return {"weight_sync/publish_s": time.perf_counter() - t0}

    def sample(self, step: int) -> list[Task]:
        """The step's batch; batches of steps step..step+ahead not sampled yet are sampled now (in step order,
        on the trainer's thread) and their rollouts started in the background."""
        last = self.trainer.cfg.train.steps - 1
        for s in range(step, min(step + self.ahead, last) + 1):
            if s not in self.futures:
                batch = (self.batches.get(s)
                         or self.trainer.scheduler.sample(self.trainer.cfg.train.batch_size))
                self.batches[s] = batch
                self.futures[s] = self.executor.submit(self._run, s, batch)
        return self.batches[step]

    def run(self, step: int, batch: list[Task]) -> tuple[list[Episode], dict[str, float]]:
        """Wait for the step's rollout (started by `sample`): only the part the update did not hide."""
        episodes, metrics = self.futures.pop(step).result()
        del self.batches[step]
        return episodes, metrics

    def _run(self, step: int, batch: list[Task]) -> tuple[list[Episode], dict[str, float]]:
        """Load the weights `ahead` steps older than the step, then run its rollout (background thread)."""
        need = max(self.start, step - self.ahead)
        with self.cond:
            self.cond.wait_for(lambda: need in self.snapshots or self.closing)
            if self.closing:
                raise RuntimeError("rollouts closed")
            version, pairs = self.snapshots[need]
            for done in [d for d in self.snapshots if d < need]:
                del self.snapshots[done]  # later rollouts need later weights
        with self.running:
            synced = self.trainer.policy.sync_weights(pairs, version)
            rollouts = self.trainer.rollouts
            episodes = rollouts.run(batch, self.trainer.cfg.rollout.group_size, step=step,
                                    seed=self.seed_of(step))
            metrics = rollouts.stats.as_metrics()
        metrics["weight_sync/seconds"] = synced or 0.0
        return episodes, metrics

    def idle(self) -> AbstractContextManager:
        """While held, no rollout runs (the running one is waited for): held-out evaluation may then put the
        trainer's weights into the generation copy; the next rollout loads its own weights first anyway."""
        return self.running

    def pending(self) -> dict[int, list[str]]:
        """The sampled, untrained batches as JSON task records (saved with a checkpoint)."""
        return {s: [t.model_dump_json() for t in batch] for s, batch in sorted(self.batches.items())}

    def __exit__(self, *exc: object) -> None:
        """Drop rollouts not yet started; wait for the running one (its sandboxes must be returned)."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.executor.shutdown(wait=True, cancel_futures=True)


class EngineFeed(SyncFeed):
    """Synchronous rollouts of a run with engines on several ranks: rank 0 runs every group of the step
    through the engines; the other ranks run none and get no episodes (rank 0 broadcasts the update's
    samples)."""

    def run(self, step: int, batch: list[Task]) -> tuple[list[Episode], dict[str, float]]:
        if not self.trainer.dist.main:
            return [], {}
        rollouts = self.trainer.rollouts
        episodes = rollouts.run(batch, self.trainer.cfg.rollout.group_size, step=step,
                                seed=self.seed_of(step),
                                repeats=batch_repeats(batch))
        return episodes, rollouts.stats.as_metrics()


Feed = SyncFeed | AheadFeed | EngineFeed


def feed_for(trainer: Trainer, seed_of: Callable[[int], int], start: int,
             pending: dict[int, list[str]] | None = None) -> Feed:
    """Synchronous rollouts, rollouts `train.max_staleness` steps ahead (the loop starts at step `start`), or
    with engine actors on several ranks every rollout through them on rank 0."""
    if trainer.engines is not None:
        return EngineFeed(trainer, seed_of)
    ahead = trainer.cfg.train.max_staleness
    return AheadFeed(trainer, seed_of, ahead, start, pending) if ahead > 0 else SyncFeed(trainer, seed_of)
