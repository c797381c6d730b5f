"""The training loop of DESIGN.md, as named, timed phases: sample, rollout (scored as each episode ends),
update (groups, advantages, the policy step), record.

    for step in range(total_steps):
        batch    = scheduler.sample(batch_size)
        episodes = rollout.run(policy, batch, sandboxes)     # each scored by the run's Scorer as it ends
        policy.update(advantages(groups(episodes)))
        store.write(episodes); monitor.log(step, episodes); scheduler.observe(episodes)

Around it: the run is set up (`parts.build`), optionally warm-started with SFT, measured on its held-out set
before and after RL, checkpointed every `train.checkpoint_every` steps and resumed from its last checkpoint.
Simplifications, on purpose: no value model; one process per rank, where generation, the update and the
verification workers share it. With several ranks (torchrun, or Ray with `--cluster`; rlvr.train.distributed)
rank 0 samples, stores, monitors and evaluates, every rank generates its share of the groups (with engine
actors, `policy.engines`, rank 0 generates them all through the engines) and takes part in the sharded update.
By default the policy used for rollouts is the one being trained; with `train.max_staleness >= 1` the
rollouts of the next steps are generated from a synced copy of the weights while the update runs
(rlvr.train.rollouts).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from rlvr.config import RunConfig, load_config
from rlvr.errors import MostlyMasked, UserError
from rlvr.monitor.evals import first_mask_error
from rlvr.rollout.agents import refuse_unsupported
from rlvr.rollout.episode import Episode, split_segments
from rlvr.rollout.groups import group_key, zero_variance_groups
from rlvr.store.layout import HELDOUT_AFTER, HELDOUT_BEFORE, SUMMARY_FILE, RunLayout, heldout_label
from rlvr.train import checkpoint, distributed
from rlvr.train.advantages import episode_advantages, estimator
from rlvr.train.distributed import Dist
from rlvr.train.distributed.engines import EngineRollouts, refuse_ray_launch
from rlvr.train.heldout import HeldoutResult, evaluate
from rlvr.train.losses import aggregate_fn, loss_fn
from rlvr.train.parts import Parts, build
from rlvr.train.progress import TrainProgress
from rlvr.train.rollouts import AheadRollouts, SyncRollouts, rollouts_for
from rlvr.train.sft import gold_examples, jsonl_examples, reference_examples, train_sft
from rlvr.train.state import RunState
from rlvr.train.update import correction_settings, samples_from


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


def run(cfg: RunConfig, resume: bool = True) -> dict[str, Any]:
    """Train as `cfg` says (no config: the quickstart); returns the summary written to `summary.json`."""
    t_start = time.perf_counter()
    validate(cfg)
    if distributed.ray_launch(cfg):  # `--cluster` with world_size > 1: Ray starts the ranks, each runs this
        refuse_ray_launch(cfg)
        return distributed.run_on_ray(run, cfg, resume)
    dist = distributed.init(cfg)  # a bad world size, backend or launch is refused before any work
    try:
        return _run(cfg, resume, dist, t_start)
    finally:
        dist.close()


def _run(cfg: RunConfig, resume: bool, dist: Dist, t_start: float) -> dict[str, Any]:
    run_url = cfg.store.url or str(cfg.run_dir)
    start = None
    if dist.main:  # rank 0 owns the run directory; the others wait until it is ready
        start = checkpoint.latest_step(run_url) if resume else None
        if start is None:
            _fresh_run_dir(cfg, run_url)
        else:
            _check_resumable(cfg)
        cfg.write(cfg.run_dir)
    start = dist.broadcast(start)
    torch.manual_seed(cfg.seed)
    progress_to = None if dist.main else Console(quiet=True)  # one progress display: rank 0's
    with TrainProgress(cfg, console=progress_to) as progress, build(cfg, run_url, progress, dist) as parts:
        state = (_restore(parts, run_url, start) if start is not None
                 else _warm_start(parts, cfg, progress, t_start))
        elapsed = functools.partial(_elapsed, state, t_start)
        if start is not None and start >= cfg.train.steps:
            progress.note(f"run already complete at step {start} of {cfg.train.steps}: nothing to train "
                          "(start over with --no-resume, or raise train.steps)")
        elif start is not None:
            progress.note(f"resuming from the checkpoint after step {start} of {cfg.train.steps}")
        seed_of = functools.partial(step_seed, cfg.seed)
        # with engine actors on several ranks, rank 0 runs every rollout through them
        rollouts = (EngineRollouts(parts, seed_of) if parts.engines is not None
                    else rollouts_for(parts, seed_of, state.step, state.pending))
        with rollouts:
            masked = MaskedSteps()
            for step in range(state.step, cfg.train.steps):
                metrics = train_step(parts, step, rollouts)
                stop = masked.check(step, metrics, parts.extras.pop("first_mask_error", None)) if dist.main else None
                stop = dist.broadcast(stop)  # every rank stops together
                if stop:
                    raise MostlyMasked(stop)
                state.step = step + 1
                progress.rl_step(step + 1, metrics)
                every = cfg.train.heldout_every
                if every and (step + 1) % every == 0 and step + 1 < cfg.train.steps:
                    with rollouts.idle():
                        state.add_point(_heldout(parts, heldout_label(step + 1), step + 1), step + 1, elapsed())
                if (step + 1) % cfg.train.checkpoint_every == 0 or step + 1 == cfg.train.steps:
                    state.pending = rollouts.pending()
                    _save(parts, run_url, state, elapsed())
        after = _heldout(parts, HELDOUT_AFTER, cfg.train.steps)
        state.add_point(after, cfg.train.steps, elapsed())
        summary = _summary(cfg, after, state, elapsed(), dist)
        mine, total = distributed.local_numel(parts.policy.model)
        summary.update(model_params=total, rank_params=dist.all_gather(mine),  # about total / N each with FSDP2
                       rank_state_bytes=dist.all_gather(distributed.local_state_bytes(parts.policy.model,
                                                                                      parts.updater.optimizer)))
        _finish(parts, cfg, summary)
    if dist.main:
        progress.final(summary)
    return summary


def validate(cfg: RunConfig) -> None:
    """Refuse a bad config before anything is built or written (names resolve, the SFT file exists)."""
    estimator(cfg.train.advantage)
    loss_fn(cfg.train.loss)
    aggregate_fn(cfg.train.aggregation)
    correction_settings(cfg.train)
    if cfg.train.mixed_precision != "no" and cfg.policy.dtype != "float32":
        raise UserError(f"mixed_precision = {cfg.train.mixed_precision!r} keeps float32 weights and optimizer "
                        f"state, but policy.dtype is {cfg.policy.dtype!r}", field="train.mixed_precision",
                        fix='set policy.dtype = "float32", or mixed_precision = "no" to train in that dtype')
    if cfg.sft.enabled and cfg.sft.source not in ("reference", "gold") and not Path(cfg.sft.source).is_file():
        raise UserError("no such SFT file", file=cfg.sft.source, field="sft.source",
                        fix='give a JSONL file of {prompt, completion} records, "reference" or "gold"')
    launched = distributed.launch_env()
    ranks = int(launched["WORLD_SIZE"]) if launched else (cfg.train.world_size or 1)
    refuse_unsupported(cfg, ranks=ranks)  # agents: one rank, synchronous, the local isolated sandbox
    if cfg.sft.recovery_every and ranks > 1:
        raise UserError("recovery samples in the loop run on one rank only", field="sft.recovery_every",
                        fix="set sft.recovery_every = 0 to train on several ranks")


def train_step(parts: Parts, step: int, rollouts: SyncRollouts | AheadRollouts | None = None) -> dict[str, float]:
    """One step of the loop, in the phases of DESIGN.md's pseudo-code, each timed (`time/<phase>_s`).

    The rollout runs in the step, or ahead of it in asynchronous mode (then `rollout` times only the part of
    it the update did not hide); scoring happens inside it, as each episode ends.
    """
    timer = PhaseTimer()
    rollouts = rollouts or SyncRollouts(parts, functools.partial(step_seed, parts.cfg.seed))
    with timer("sample"):
        batch = rollouts.sample(step)
    with timer("rollout"):
        episodes, metrics = rollouts.run(step, batch)
    parts.extras["first_mask_error"] = first_mask_error(episodes)
    # asynchronous: the next steps' rollouts run beside the update, on the policy's threads
    with timer("update"), parts.training(beside_rollout=parts.cfg.train.max_staleness > 0):
        metrics.update(update_policy(parts, episodes, step))
        metrics.update(rollouts.publish(step + 1))
    with timer("record"):
        if parts.dist.main:  # rank 0 holds every episode of the step: it alone stores, observes and logs them
            parts.store.write(step, parts.retention.kept(episodes))
            metrics.update(parts.scheduler.observe(episodes))
    if parts.recovery is not None and parts.recovery.enabled and parts.dist.main:
        parts.recovery.observe(batch, episodes)
        if parts.recovery.due(step):  # failures back into training: recovery samples, one SFT step
            with timer("recovery"):
                metrics.update(parts.recovery.step(seed=step_seed(parts.cfg.seed, step)))
                parts.sync_generation()
    if parts.dist.main:
        metrics.update(timer.metrics())
        metrics.update(fleet_metrics(parts.pool))
        metrics.update(parts.monitor.log(step, episodes, metrics))
    return metrics


def fleet_metrics(pool: Any) -> dict[str, float]:
    """The sandbox fleet's size and history when it is on Ray (`cluster/workers`, `cluster/draining`,
    `cluster/replaced`, `cluster/asked`: workers asked of the autoscaler); nothing for a local pool."""
    stats = getattr(pool, "stats", None)
    if stats is None or not hasattr(pool, "events"):
        return {}
    s = stats()
    return {"cluster/workers": float(s["actors"]), "cluster/draining": float(s["draining"]),
            "cluster/replaced": float(s["replaced"]), "cluster/asked": float(s["asked"])}


class MaskedSteps:
    """Stops a run after `LIMIT` steps in a row in which most episodes were masked by infra faults: it would
    train on nothing and say nothing about the policy. The step's episodes are already stored."""

    LIMIT = 3

    def __init__(self) -> None:
        self.run = 0
        self.first_error: str | None = None

    def check(self, step: int, metrics: dict[str, float], first_error: str | None) -> str | None:
        """Why the run must stop after `step`, or None (rank 0's view: it holds every episode)."""
        total = metrics.get("train/episodes", 0.0)
        if total and metrics.get("train/masked_episodes", 0.0) > total / 2:
            self.run += 1
            self.first_error = self.first_error or first_error
        else:
            self.run, self.first_error = 0, None
        if self.run < self.LIMIT:
            return None
        return (f"steps {step + 2 - self.LIMIT}-{step + 1}: most episodes were masked by infra faults in "
                f"{self.LIMIT} steps in a row; first: {self.first_error or 'unknown'}")


def update_policy(parts: Parts, episodes: list[Episode], step: int) -> dict[str, float]:
    """Groups, advantages within each, then the policy update; zero-variance groups (`schedule.
    skip_zero_variance`) and groups sampled too many versions ago are left out and counted."""
    dist = parts.dist
    skipped = set(zero_variance_groups(episodes)) if parts.cfg.schedule.skip_zero_variance else set()
    stale = stale_groups(episodes, parts.policy.version, parts.cfg.train.max_staleness) - skipped
    learn = [ep for ep in episodes if group_key(ep) not in skipped | stale]
    lags = [parts.policy.version - ep.policy_version for ep in learn]
    advantages = episode_advantages(learn, parts.cfg.train.advantage)
    # an agent's episode may hold several segments (it edited its history): each trains on its own tokens
    samples = samples_from(split_segments(learn), advantages) if dist.main else None
    samples = dist.broadcast(samples)  # rank 0 holds the step's episodes; every rank steps on the same samples
    with dist.collective("the update"):  # FSDP2/DDP collectives run inside it
        metrics = parts.updater.step(samples, seed=step_seed(parts.cfg.seed, step))
    if samples:
        parts.policy.version += 1
    judged = [ep for ep in episodes if not ep.masked]
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


# ------------------------------------------------------------------------------------------- run phases
def _fresh_run_dir(cfg: RunConfig, run_url: str) -> None:
    """Start over: drop an earlier run's checkpoints and records under the same name."""
    RunLayout(cfg.run_dir).start_over(records=RunLayout(run_url))


RESUMABLE_CHANGES = ("train.steps", "train.checkpoint_every", "train.heldout_every", "sandbox.", "monitor.",
                     "cluster.", "store.storage_options", "train.world_size", "train.dist_backend", "train.sharding",
                     "train.threads", "train.activation_checkpointing", "train.micro_batch_size",
                     "train.micro_batch_tokens")
"""Config fields a resumed run may change: its length and how it runs (on how many ranks, threads, and in what
memory: checkpointing and micro-batches give the same gradient), never what it trains. A run stopped by the
out-of-memory killer resumes with smaller micro-batches."""


def _check_resumable(cfg: RunConfig) -> None:
    """Refuse to resume a checkpoint under a config that trains something else (the saved config.toml)."""
    saved = RunLayout(cfg.run_dir).config
    if not saved.is_file():
        return
    try:
        old = load_config(saved)
    except UserError:
        return  # a config this version cannot read: the checkpoint itself decides (it loads, or it fails loudly)
    before = _flat(old.model_dump(mode="json"))
    changed = [k for k, v in _flat(cfg.model_dump(mode="json")).items()
               if before.get(k) != v and not k.startswith(RESUMABLE_CHANGES)]
    if changed:
        raise UserError(f"the run to resume was trained with another config ({', '.join(changed[:3])} differ)",
                        file=saved, field=changed[0],
                        fix="start over with --no-resume, choose another name, or restore the old setting")


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict) and v and k != "domains":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _warm_start(parts: Parts, cfg: RunConfig, progress: TrainProgress, t_start: float) -> RunState:
    """SFT (when enabled), then the held-out measurement before RL; checkpointed as step 0."""
    state = RunState()
    if cfg.sft.enabled and cfg.sft.steps > 0:
        with progress.phase("sft", cfg.sft.steps) as advance:
            heldout = {t.key for t in parts.heldout}  # never trained on, whatever the source
            if cfg.sft.source == "reference":
                examples: list[Any] = reference_examples(parts.train_sources, cfg.sft.examples, seed=cfg.seed,
                                                         limit_index=cfg.tasks.heldout_offset, exclude=heldout)
            elif cfg.sft.source == "gold":
                examples = gold_examples(parts.train_sources, cfg.sft.examples, parts.gold_engine, parts.policy,
                                         seed=cfg.seed, limit_index=cfg.tasks.heldout_offset, exclude=heldout)
            else:
                examples = jsonl_examples(cfg.sft.source)
            with parts.training():
                state.sft = train_sft(parts.policy, examples, cfg.sft, seed=cfg.seed, dist=parts.dist,
                                      on_step=lambda i, loss: advance(i, loss=loss))
        parts.sync_generation()
        parts.monitor.log(0, [], state.sft)
    state.before = _heldout(parts, HELDOUT_BEFORE, 0)
    state.add_point(state.before, 0, _elapsed(state, t_start))
    _save(parts, str(parts.run_url), state, _elapsed(state, t_start))
    return state


def _elapsed(state: RunState, t_start: float) -> float:
    """Wall seconds of the whole run so far, earlier processes of a resumed run included."""
    return state.wall_before + time.perf_counter() - t_start


def _heldout(parts: Parts, label: str, step: int) -> HeldoutResult | None:
    if not parts.heldout:
        return None
    parts.sync_generation()  # evaluate the trainer's weights, not the copy a rollout ahead left behind
    if not parts.dist.main:
        return None  # rank 0 measures alone, from its full copy of the weights
    result = evaluate(parts, parts.heldout, label)
    parts.monitor.log(step, [], {f"eval/pass1_{label}": result.pass1, f"eval/greedy_pass1_{label}": result.greedy})
    return result


def _save(parts: Parts, run_url: str, state: RunState, wall_s: float) -> None:
    """A checkpoint after `state.step` steps: weights, optimizer, scheduler and the run state. Alone: one
    record, one file. On several ranks: each rank writes its own shards of the weights and optimizer state
    (nothing is gathered) and rank 0 the rest beside them. Both are keyed by parameter name, so a run resumes at
    any world size."""
    model, optimizer = parts.policy.model, parts.updater.optimizer
    record: dict[str, Any] = {
        "updater": {"lr_schedule": parts.updater.lr_schedule.state_dict()},
        "scheduler": parts.scheduler.state_dict(), "policy_version": parts.policy.version,
        "run_state": dataclasses.replace(state, wall_before=wall_s).to_dict(), "world_size": parts.dist.world_size,
    }
    if parts.dist.active:
        checkpoint.save_sharded(run_url, state.step, record, model, optimizer, parts.dist)
    else:
        record["model"], record["updater"]["optimizer"] = distributed.full_state(model, optimizer)
        checkpoint.save(run_url, state.step, record)
    parts.dist.barrier()  # no rank runs ahead of a checkpoint it may have to resume from


def _restore(parts: Parts, run_url: str, step: int) -> RunState:
    saved = checkpoint.load(run_url, step, parts.dist.rank)  # every rank reads it: its RNG states come back
    source = saved.get("shards") or RunLayout(run_url).checkpoint(step)
    state = RunState.from_dict(saved.get("run_state"), source=source, resumed_from=step)
    updater = saved["updater"]
    if "shards" in saved:  # written by several ranks: resharded to this world size as it is read
        checkpoint.load_shards(saved, parts.policy.model, parts.updater.optimizer)
        parts.updater.lr_schedule.load_state_dict(updater["lr_schedule"])
    elif _by_name(updater["optimizer"]):
        distributed.load_full_state(parts.policy.model, parts.updater.optimizer, saved["model"],
                                    updater["optimizer"])
        parts.updater.lr_schedule.load_state_dict(updater["lr_schedule"])
    else:  # a single-process checkpoint of an earlier version (optimizer state by parameter index)
        parts.policy.model.load_state_dict(saved["model"])
        parts.updater.load_state_dict(updater)
    parts.scheduler.load_state_dict(saved["scheduler"])
    parts.policy.version = int(saved["policy_version"])
    parts.sync_generation()
    if parts.dist.main:
        parts.drop_records_after(step)  # steps after the checkpoint are replayed, not stored twice
    parts.dist.barrier()
    return state


def _by_name(optimizer_state: dict) -> bool:
    """Whether a saved optimizer state is keyed by parameter name (any world size loads it), not by index."""
    groups = optimizer_state.get("param_groups") or [{}]
    return not optimizer_state or isinstance((groups[0].get("params") or [""])[0], str)


def _summary(cfg: RunConfig, after: HeldoutResult | None, state: RunState, wall_s: float,
             dist: Dist = distributed.SINGLE) -> dict[str, Any]:
    before = state.before
    out: dict[str, Any] = {
        "run": cfg.name, "run_dir": str(cfg.run_dir), "steps": cfg.train.steps,
        "world_size": dist.world_size, "backend": dist.backend or "none", "sharding": dist.sharding,
        "pass1_before": before.pass1 if before else None, "pass1_after": after.pass1 if after else None,
        "heldout_tasks": after.tasks if after else 0, "wall_s": round(wall_s, 2),
    }
    if before and after:
        out.update({"pass1_gain": after.pass1 - before.pass1, "greedy_pass1_before": before.greedy,
                    "greedy_pass1_after": after.greedy, "heldout_samples_per_task": after.samples_per_task,
                    "pass1_ci_before": before.ci, "pass1_ci_after": after.ci})
    if state.resumed_from is not None:
        out["resumed_from_step"] = state.resumed_from
    if state.curve:
        out["curve"] = [dataclasses.asdict(p) for p in state.curve]
    out.update(state.sft)
    return out


def _finish(parts: Parts, cfg: RunConfig, summary: dict[str, Any]) -> None:
    """Final model (loadable with `hf:<run_dir>/model`), summary.json, pass rates and the report."""
    layout = RunLayout(cfg.run_dir)
    model_dir = layout.model
    if parts.dist.active:  # the sharded weights gathered in full (a collective); rank 0 writes them
        model = distributed.unwrapped(parts.policy.model)
        tied = ({n for n, _ in model.named_parameters(remove_duplicate=False)}
                - {n for n, _ in model.named_parameters()})  # second names of shared weights (a tied head)
        weights = {k: v for k, v in distributed.full_weights(model) if k not in tied}
        if not parts.dist.main:
            return
        model.save_pretrained(model_dir, state_dict=weights)
    else:
        parts.policy.model.save_pretrained(model_dir)
    parts.policy.tokenizer.save_pretrained(model_dir)
    parts.scheduler.save_pass_rates(layout.pass_rates)
    path = layout.summary
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(path)
    parts.monitor.close()
    if cfg.monitor.report:
        from rlvr.monitor.report import write_report

        summary["report"] = str(write_report(cfg.run_dir))
    summary["summary"] = str(path)
    summary["model"] = str(model_dir)


def load_summary(run_dir: str | Path) -> dict[str, Any]:
    """A finished run's summary.json."""
    path = Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        raise UserError("no summary.json: the run has not finished", file=path, fix="run `rlvr train` to the end")
    return json.loads(path.read_text())
