"""The training loop of DESIGN.md, as named, timed phases: sample, rollout (scored as each episode ends),
update (groups, advantages, the policy step), record.

    for step in range(total_steps):
        batch    = scheduler.sample(batch_size)
        episodes = rollout.run(policy, batch, sandboxes)     # each scored by the run's Scorer as it ends
        policy.update(advantages(groups(episodes)))
        store.write(episodes); monitor.log(step, episodes); scheduler.observe(episodes)

`train` drives a built `Trainer` (`rlvr.run.train` builds it from a RunConfig): optionally warm-started with
SFT, measured on its held-out set before and after RL, checkpointed every `train.checkpoint_every` steps and
resumed from its last checkpoint (`rlvr.train.checkpoint.Checkpoints`). Simplifications, on purpose: no value
model; one process per rank, where generation, the update and the verification workers share it. With several
ranks rank 0 samples, stores, monitors and evaluates, every rank generates its share of the groups (with
engine actors, rank 0 generates them all through the engines) and takes part in the sharded update. By default
the policy used for rollouts is the one being trained; with `train.max_staleness >= 1` the rollouts of the
next steps are generated from a synced copy of the weights while the update runs (`rlvr.train.feed`).
"""
from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlvr.errors import MostlyMasked
from rlvr.monitor.evals import first_mask_error
from rlvr.monitor.metrics import LOOP_RATES
from rlvr.rollout.core.groups import group_key, zero_variance_groups
from rlvr.rollout.episode import Episode, split_segments
from rlvr.store.layout import HELDOUT_AFTER, HELDOUT_BEFORE, heldout_label
from rlvr.train import distributed
from rlvr.train.advantages import episode_advantages, turn_advantages
from rlvr.train.display import phase
from rlvr.train.feed import Feed, SyncFeed, feed_for
from rlvr.train.heldout import evaluate
from rlvr.train.sft import train_sft
from rlvr.train.state import HeldoutResult, RunState
from rlvr.train.trainer import Trainer, fleet_metrics
from rlvr.train.update import samples_from


class PhaseTimer:
    """`with timer("rollout"): ...` accumulates seconds per named phase (reported as `time/<phase>_s`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        return {f"time/{k}_s": v for k, v in self.seconds.items()}


def step_seed(seed: int, step: int) -> int:
    """The rollout seed of a step: a function of (run seed, step) only, so a resumed step samples the same."""
    return int.from_bytes(hashlib.sha256(f"rlvr-step|{seed}|{step}".encode()).digest()[:6], "big")


def train(trainer: Trainer, start: int | None, t_start: float) -> dict[str, Any]:
    """Train from scratch (`start` None: SFT warm start, held-out before) or from the checkpoint after step
    `start`; returns the run's summary (also written to summary.json)."""
    cfg, dist, display = trainer.cfg, trainer.dist, trainer.display
    state = _restore(trainer, start) if start is not None else _warm_start(trainer, t_start)
    elapsed = functools.partial(_elapsed, state, t_start)
    if display is not None and start is not None:
        display.note(f"run already complete at step {start} of {cfg.train.steps}: nothing to train "
                     f"(start over "
                     "with --no-resume, or raise train.steps)" if start >= cfg.train.steps else
                     f"resuming from the checkpoint after step {start} of {cfg.train.steps}")
    with feed_for(trainer, functools.partial(step_seed, cfg.seed), state.step, state.pending) as feed:
        masked = MaskedSteps()
        for step in range(state.step, cfg.train.steps):
            metrics, episodes = train_step(trainer, step, feed)
            stop = dist.broadcast(masked.check(step, metrics, episodes) if dist.main else None)
            if stop:  # every rank stops together
                raise MostlyMasked(stop)
            state.step = step + 1
            if display is not None:
                display.rl_step(step + 1, metrics)
            every = cfg.train.heldout_every
            if every and (step + 1) % every == 0 and step + 1 < cfg.train.steps:
                with feed.idle():
                    state.add_point(_heldout(trainer, heldout_label(step + 1), step + 1), step + 1, elapsed())
            if (step + 1) % cfg.train.checkpoint_every == 0 or step + 1 == cfg.train.steps:
                state.pending = feed.pending()
                trainer.checkpoints.save(state, elapsed())
    after = _heldout(trainer, HELDOUT_AFTER, cfg.train.steps)
    state.add_point(after, cfg.train.steps, elapsed())
    summary = state.summary(after, elapsed(), run=cfg.name, run_dir=str(cfg.run_dir), steps=cfg.train.steps,
                            world_size=dist.world_size, backend=dist.backend or "none",
                            sharding=dist.sharding)
    mine, total = distributed.local_numel(trainer.policy.model)
    summary.update(model_params=total, rank_params=dist.all_gather(mine),  # about total / N each with FSDP2
                   rank_state_bytes=dist.all_gather(distributed.local_state_bytes(trainer.policy.model,
                                                                                  trainer.updater.optimizer)))
    _finish(trainer, summary)
    return summary


def train_step(trainer: Trainer, step: int, feed: Feed | None = None) -> tuple[dict[str, float],
                                                                               list[Episode]]:
    """One step of the loop, in the phases of DESIGN.md's pseudo-code, each timed (`time/<phase>_s`); the
    step's metrics and episodes (rank 0 holds all of them).

    The rollout runs in the step, or ahead of it in asynchronous mode (then `rollout` times only the part of
    it the update did not hide); scoring happens inside it, as each episode ends.
    """
    timer = PhaseTimer()
    feed = feed or SyncFeed(trainer, functools.partial(step_seed, trainer.cfg.seed))
    main = trainer.dist.main
    with timer("sample"):
        batch = feed.sample(step)
    with timer("rollout"):
        episodes, metrics = feed.run(step, batch)
    # asynchronous: the next steps' rollouts run beside the update, on the policy's threads
    with timer("update"), trainer.training(beside_rollout=trainer.cfg.train.max_staleness > 0):
        metrics.update(update_policy(trainer, episodes, step))
        metrics.update(feed.publish(step + 1))
    with timer("record"):
        if main:  # rank 0 holds every episode of the step: it alone stores, observes and logs them
            trainer.store.write(step, trainer.retention.kept(episodes))
            metrics.update(trainer.scheduler.observe(episodes))
    recovery = trainer.recovery
    if recovery is not None and recovery.enabled:
        if main:  # rank 0 holds the step's episodes
            recovery.observe(batch, episodes)
        if recovery.due(step):  # failures back into training: recovery samples, one SFT step on every rank
            with timer("recovery"):
                metrics.update(recovery.step(seed=step_seed(trainer.cfg.seed, step)))
                trainer.sync_generation()
    if main:
        metrics.update(timer.metrics())
        metrics.update(fleet_metrics(trainer.pool))
        metrics.update(trainer.monitor.log(step, episodes, metrics))
    return metrics, episodes


def update_policy(trainer: Trainer, episodes: list[Episode], step: int) -> dict[str, float]:
    """Groups, advantages within each, then the policy update; zero-variance groups (`schedule.
    skip_zero_variance`) and groups sampled too many versions ago are left out and counted."""
    cfg, dist, policy = trainer.cfg, trainer.dist, trainer.policy
    # what truncated episodes teach (the run's choice), before groups are judged
    shaped, truncation = trainer.truncation.apply(episodes)
    skipped = set(zero_variance_groups(shaped)) if cfg.schedule.skip_zero_variance else set()
    stale = stale_groups(shaped, policy.version, cfg.train.max_staleness) - skipped
    learn = [ep for ep in shaped if group_key(ep) not in skipped | stale]
    lags = [policy.version - ep.policy_version for ep in learn]
    advantages = episode_advantages(learn, cfg.train.advantage)
    turns = turn_advantages(learn, cfg.train.advantage, advantages) if cfg.train.turn_baseline else None
    # an agent's episode may hold several segments (it edited its history): each trains on its own tokens
    samples = samples_from(split_segments(learn), advantages, turns) if dist.main else None
    # rank 0 holds the step's episodes; every rank steps on the same samples
    samples = dist.broadcast(samples)
    with dist.collective("the update"):  # FSDP2/DDP collectives run inside it
        metrics = trainer.updater.step(samples, seed=step_seed(cfg.seed, step))
    if samples:
        policy.version += 1
    judged = [ep for ep in episodes if not ep.masked]
    metrics.update(truncation)
    metrics.update({
        "train/skipped_groups": float(len(skipped)),
        "train/stale_groups": float(len(stale)),
        "train/staleness_mean": sum(lags) / len(lags) if lags else 0.0,
        "train/staleness_max": float(max(lags, default=0)),
        "train/masked_episodes": float(len(episodes) - len(judged)),
        "train/episodes": float(len(episodes)),
        "reward/mean": sum(ep.reward for ep in judged) / len(judged) if judged else 0.0,
        "reward/pass_rate": sum(ep.passed for ep in judged) / len(judged) if judged else 0.0,
    })
    return metrics


def stale_groups(episodes: list[Episode], version: int, bound: int) -> set[str]:
    """Groups with an episode sampled more than `bound` versions before `version` (left out of the update)."""
    return {group_key(ep) for ep in episodes if version - ep.policy_version > bound}


class MaskedSteps:
    """Stops a run after `LIMIT` steps in a row in which most episodes were masked by infra faults: it would
    train on nothing and say nothing about the policy. The step's episodes are already stored."""

    LIMIT = 3

    def __init__(self) -> None:
        self.run = 0
        self.first_error: str | None = None

    def check(self, step: int, metrics: dict[str, float], episodes: list[Episode]) -> str | None:
        """Why the run must stop after `step`, or None (rank 0's view: it holds every episode)."""
        total = metrics.get("train/episodes", 0.0)
        if total and metrics.get("train/masked_episodes", 0.0) > total / 2:
            self.run += 1
            self.first_error = self.first_error or first_mask_error(episodes)
        else:
            self.run, self.first_error = 0, None
        if self.run < self.LIMIT:
            return None
        return (f"steps {step + 2 - self.LIMIT}-{step + 1}: most episodes were masked by infra faults in "
                f"{self.LIMIT} steps in a row; first: {self.first_error or 'unknown'}")


def _warm_start(trainer: Trainer, t_start: float) -> RunState:
    """SFT (when enabled), then the held-out measurement before RL; checkpointed as step 0."""
    cfg, state = trainer.cfg, RunState()
    if cfg.sft.enabled and cfg.sft.steps > 0:
        with phase(trainer.display, "sft", cfg.sft.steps) as advance:
            examples = trainer.sft_examples()
            with trainer.training():
                state.sft = train_sft(trainer.policy, examples, cfg.sft, seed=cfg.seed, dist=trainer.dist,
                                      on_step=lambda i, loss: advance(i, loss=loss))
        trainer.sync_generation()
        trainer.monitor.log(0, [], state.sft)
    state.before = _heldout(trainer, HELDOUT_BEFORE, 0)
    state.add_point(state.before, 0, _elapsed(state, t_start))
    trainer.checkpoints.save(state, _elapsed(state, t_start))
    return state


def _restore(trainer: Trainer, step: int) -> RunState:
    state = trainer.checkpoints.restore(step)
    trainer.sync_generation()
    trainer.dist.barrier()
    return state


def _finish(trainer: Trainer, summary: dict[str, Any]) -> None:
    """The run's end: the model, summary.json, pass rates and the report (`Checkpoints.finish`)."""
    trainer.checkpoints.finish(summary, close=trainer.monitor.close)


def _elapsed(state: RunState, t_start: float) -> float:
    """Wall seconds of the whole run so far, earlier processes of a resumed run included."""
    return state.wall_before + time.perf_counter() - t_start


def _heldout(trainer: Trainer, label: str, step: int) -> HeldoutResult | None:
    if not trainer.heldout.tasks:
        return None
    trainer.sync_generation()  # evaluate the trainer's weights, not the copy a rollout ahead left behind
    if not trainer.dist.main:
        return None  # rank 0 measures alone, from its full copy of the weights
    result = evaluate(trainer, label)
    loop = {f"heldout_loop/{name}": v for name, v in (result.loop or {}).items()
            if name in LOOP_RATES and isinstance(v, float)}
    trainer.monitor.log(step, [], {f"eval/pass1_{label}": result.pass1,
                                   f"eval/greedy_pass1_{label}": result.greedy, **loop})
    return result
