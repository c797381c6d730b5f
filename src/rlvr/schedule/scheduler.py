"""The Scheduler: which tasks the next batch practises, mixed across domains and tiered by pass rate."""
from __future__ import annotations

import difflib
import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr.config import BudgetConfig, ScheduleConfig
from rlvr.errors import UserError
from rlvr.rollout.core.groups import group_rewards, is_zero_variance, reward_variance
from rlvr.schedule.mixing import allocate, weighted_sample
from rlvr.schedule.passrates import PassRateTable
from rlvr.schedule.tiers import TIER_NAMES, UNSEEN, tier_of, tier_weight
from rlvr.tasks.selection import Selection
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task, TaskLimits

if TYPE_CHECKING:  # the rollout package may pull in torch; the scheduler only reads episode fields
    from rlvr.rollout.episode import Episode

SCHEDULER_STATE_VERSION = 1


@dataclass
class _Stream:
    """One domain or pack the scheduler draws from."""

    name: str
    source: TaskSource
    pool: list[int] | None
    """Fixed candidate indices; None for an unbounded procedural source (fresh indices are drawn)."""
    cursor: int = 0
    """Next fresh index of an unbounded procedural source."""
    known: dict[int, str] = field(default_factory=dict)
    """Index -> task key of every task served (or known from loaded pass rates), in first-seen order."""
    weights: np.ndarray | None = None
    """Sampling weight of each pool entry, kept current as pass rates change (a draw is then O(pool) in C)."""
    position: dict[int, list[int]] = field(default_factory=dict)
    """Index -> its positions in the pool."""


class Scheduler:
    """Samples training batches and learns per-task pass rates from the episodes they produce.

    * Mixing: each domain first gets its `quotas` share of a batch, the rest is split by `weights`.
    * Tiers: a task's pass-rate EMA puts it in `never` (at or below `band_low`), `always` (at or above
      `band_high`), `learnable` or `unseen`; `never` and `always` tasks are drawn with `outside_band_weight`.
    * Procedural domains draw fresh indices (a share `fresh_share` of their draws, always below the held-out
      offset) and revisit known tasks for the rest.
    * Everything random comes from one seeded stream, saved by `state_dict` for an exact resume.
    """

    def __init__(self, sources: Mapping[str, TaskSource] | Sequence[Selection], config: ScheduleConfig, *,
                 seed: int = 0, heldout_offset: int = 1_000_000,
                 held_out: Mapping[str, Collection[int]] | None = None) -> None:
        self.config = config
        self.seed = seed
        self.heldout_offset = heldout_offset
        self.held_out = {name: frozenset(idx) for name, idx in (held_out or {}).items()}
        """Indices of finite sources (by source name) kept for the held-out set: never drawn for training."""
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.table = PassRateTable(config.ema)
        self._tiers: dict[str, int] = dict.fromkeys(TIER_NAMES, 0)
        self._streams: dict[str, _Stream] = {}
        self._where: dict[str, tuple[str, int]] = {}
        self._totals = {"groups": 0, "zero_variance_groups": 0, "episodes": 0, "masked_episodes": 0}
        self._last: dict[str, float] = {}
        items = list(sources.items()) if isinstance(sources,
                                                    Mapping) else [(s.source.name, s) for s in sources]
        for name, item in items:
            src, n = (item.source, item.n) if isinstance(item, Selection) else (item, None)
            self._add_stream(name or "tasks", src, n)
        if not self._streams:
            raise UserError("no training tasks", field="tasks.train", fix="name at least one domain or pack")
        self._check_config()
        if config.pass_rates_from:
            self.load_pass_rates(config.pass_rates_from)

    # ------------------------------------------------------------------------------------------ set-up
    def _add_stream(self, name: str, source: TaskSource, n: int | None) -> None:
        base, k = name, 2
        while name in self._streams:  # the same source named twice: keep both, apart
            name, k = f"{base}#{k}", k + 1
        if source.size is not None:
            pool: list[int] | None = self._finite_pool(base, source, n)
        elif n is not None:
            if n > self.heldout_offset:
                raise UserError(f"{base}:{n} reaches into the held-out range (indices >= "
                                f"{self.heldout_offset})",
                                field="tasks.train", fix="take fewer tasks or raise tasks.heldout_offset")
            pool = list(range(n))
        else:
            if self.heldout_offset <= 0:
                raise UserError(f"heldout_offset 0 leaves no training indices in procedural domain {base!r}",
                                field="tasks.heldout_offset", fix="use a positive offset, e.g. 1000000")
            pool = None
        if pool is not None and not pool:
            raise UserError(f"{base!r} has no tasks", field="tasks.train", fix="check the domain or pack")
        stream = _Stream(name, source, pool)
        if pool is not None:
            stream.weights = np.full(len(pool), self._weight(None))
            for pos, index in enumerate(pool):
                stream.position.setdefault(index, []).append(pos)
        self._streams[name] = stream

    def _finite_pool(self, name: str, source: TaskSource, n: int | None) -> list[int]:
        """`n` indices of a finite source (all without n), none of them in the held-out set."""
        excluded = self.held_out.get(source.name, frozenset())
        if not excluded:
            return source.indices(n, seed=self.seed)
        rest = [i for i in range(source.size or 0) if i not in excluded]
        if not rest:
            raise UserError(f"every task of {name!r} is in the held-out set: none is left to train on",
                            field="tasks.heldout",
                            fix=f"hold out fewer tasks, e.g. {name}:{max(1, len(excluded) // 5)}")
        if n is not None and n >= (source.size or 0):
            n = None  # every task asked for: every task the held-out set leaves
        if n is not None and n > len(rest):
            raise UserError(f"{name}:{n} asks for more tasks than the {len(rest)} left outside the "
                            f"held-out set",
                            field="tasks.train", fix="take fewer training tasks or fewer held-out tasks")
        if n is not None and n < len(rest):
            np.random.Generator(np.random.PCG64(self.seed)).shuffle(rest)
            rest = sorted(rest[:n])
        return rest

    def _check_config(self) -> None:
        cfg, names = self.config, list(self._streams)
        for fld, table in (("weights", cfg.weights), ("quotas", cfg.quotas)):
            for key, value in table.items():
                if key not in self._streams:
                    raise _unknown(f"schedule.{fld}.{key}", key, names)
                if not math.isfinite(value) or value < 0:
                    raise UserError(f"must be a finite number >= 0, got {value}",
                                    field=f"schedule.{fld}.{key}",
                                    fix="use 0 to draw a domain only through its quota")
        for key in cfg.tier_budgets:
            if key not in TIER_NAMES:
                raise _unknown(f"schedule.tier_budgets.{key}", key, list(TIER_NAMES))
        from rlvr.tasks import registry

        for key in cfg.domain_budgets:
            if key not in self._streams and not registry.is_registered(key):
                raise _unknown(f"schedule.domain_budgets.{key}", key, names)

    # ------------------------------------------------------------------------------------------ sampling
    @property
    def domains(self) -> list[str]:
        """Stream names (domains or packs) in the order given."""
        return list(self._streams)

    def sample(self, batch_size: int) -> list[Task]:
        """`batch_size` tasks mixed across domains, tiered by pass rate, with budgets applied to their
        limits."""
        if batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {batch_size}", field="train.batch_size",
                            fix="use 1 or more")
        counts = allocate(batch_size, self.domains, self.config.weights, self.config.quotas, self.rng)
        batch: list[Task] = []
        for name, k in counts.items():
            stream = self._streams[name]
            for index in self._draw(stream, k):
                task = stream.source.get(index)
                if stream.known.get(index) != task.key:
                    stream.known[index] = task.key
                    self._reweigh(stream, index)
                self._where[task.key] = (name, index)
                batch.append(self._with_budget(task))
        return batch

    def _reweigh(self, stream: _Stream, index: int) -> None:
        if stream.weights is not None:
            for pos in stream.position.get(index, ()):
                stream.weights[pos] = self._weight(stream.known.get(index))

    def _reweigh_all(self) -> None:
        for stream in self._streams.values():
            if stream.weights is not None:
                stream.weights[:] = self._weight(None)
                for index in stream.known:
                    self._reweigh(stream, index)
        self._tiers = dict.fromkeys(TIER_NAMES, 0)
        for key in self.table:
            self._tiers[self.tier(key)] += 1

    def _weight(self, key: str | None) -> float:
        return tier_weight(self.table.rate(key), self.config)

    def _draw(self, stream: _Stream, k: int) -> list[int]:
        if k <= 0:
            return []
        if stream.pool is None:
            return self._draw_procedural(stream, k)
        pool, weights = stream.pool, stream.weights
        # all outside the band at weight 0: still train on something
        if weights is None or not (weights > 0).any():
            weights = np.ones(len(pool))
        picks: list[int] = []
        while len(picks) < k:  # a pool smaller than its share repeats tasks (in different groups)
            picks.extend(weighted_sample(pool, weights, k - len(picks), self.rng))
        return picks

    def _draw_procedural(self, stream: _Stream, k: int) -> list[int]:
        fresh = int((self.rng.random(k) < self.config.fresh_share).sum())
        known = [i for i in stream.known if i < self.heldout_offset]
        picks = weighted_sample(known, [self._weight(stream.known[i]) for i in known], k - fresh, self.rng)
        while len(picks) < k:
            if stream.cursor < self.heldout_offset:
                picks.append(stream.cursor)
                stream.cursor += 1
            elif known:  # every training index used: revisit the rest first, then repeat tasks
                taken = set(picks)
                rest = [i for i in known if i not in taken] or known
                picks.extend(weighted_sample(rest, np.ones(len(rest)), k - len(picks), self.rng))
            else:
                raise UserError(f"procedural domain {stream.name!r} has no training indices left",
                                field="tasks.heldout_offset", fix="raise tasks.heldout_offset")
        return picks

    # ------------------------------------------------------------------------------------------ budgets
    def tier(self, task: Task | str) -> str:
        """The tier of a task (or task key) under its current pass rate."""
        key = task.key if isinstance(task, Task) else task
        return tier_of(self.table.rate(key), self.config)

    def budget_for(self, task: Task) -> TaskLimits:
        """The task's limits with its domain's, then its tier's budget overrides laid over them."""
        stream = self._where.get(task.key, (None, 0))[0]
        return _apply_budgets(task.limits, (
            self.config.domain_budgets.get(stream) if stream else None,
            self.config.domain_budgets.get(task.domain),
            self.config.tier_budgets.get(self.tier(task)),
        ))

    def _with_budget(self, task: Task) -> Task:
        limits = self.budget_for(task)
        return task if limits == task.limits else task.model_copy(update={"limits": limits})

    # ------------------------------------------------------------------------------------------ feedback
    def observe(self, episodes: Iterable[Episode]) -> dict[str, float]:
        """Fold a batch of episodes into the pass rates; returns this round's `schedule/*` metrics.

        Masked (infra_error) episodes never count towards a pass rate.
        """
        episodes = list(episodes)
        by_task: dict[str, list[bool]] = {}
        steps: dict[str, int] = {}
        for ep in episodes:
            key = f"{ep.domain}/{ep.task_id}"
            by_task.setdefault(key, [])
            steps[key] = max(steps.get(key, ep.step), ep.step)
            if not ep.masked:
                by_task[key].append(ep.passed)
        for key, outcomes in by_task.items():
            source, index = self._where.get(key, (None, None))
            before = self.tier(key) if key in self.table else None
            self.table.update(key, outcomes, step=steps[key], source=source, index=index)
            after = self.tier(key) if key in self.table else None
            if before != after:
                if before is not None:
                    self._tiers[before] -= 1
                if after is not None:
                    self._tiers[after] += 1
                if source is not None and index is not None:
                    self._reweigh(self._streams[source], index)
        groups = group_rewards(episodes)
        zero = [g for g, r in groups.items() if is_zero_variance(r)]
        masked = sum(ep.masked for ep in episodes)
        self._totals["groups"] += len(groups)
        self._totals["zero_variance_groups"] += len(zero)
        self._totals["episodes"] += len(episodes)
        self._totals["masked_episodes"] += masked
        variances = [reward_variance(r) for r in groups.values() if r]
        self._last = {
            "schedule/groups": float(len(groups)),
            "schedule/zero_variance_groups": float(len(zero)),
            "schedule/zero_variance_share": len(zero) / len(groups) if groups else 0.0,
            "schedule/group_reward_var": statistics.fmean(variances) if variances else 0.0,
            "schedule/masked_episodes": float(masked),
            **self.tier_shares(),
        }
        return dict(self._last)

    # ------------------------------------------------------------------------------------------ reports
    def tier_shares(self) -> dict[str, float]:
        """Share of observed tasks in each tier (`schedule/tier_<name>`) and `schedule/learnable_share`."""
        counts = {t: c for t, c in self._tiers.items() if t != UNSEEN}  # an observed task is never unseen
        total = sum(counts.values())
        out = {f"schedule/tier_{t}": (c / total if total else 0.0) for t, c in counts.items()}
        out["schedule/learnable_share"] = out["schedule/tier_learnable"]
        return out

    def metrics(self) -> dict[str, float]:
        """The latest round's metrics plus running totals (`schedule/total_*`)."""
        return {**self._last, **{f"schedule/total_{k}": float(v) for k, v in self._totals.items()}}

    # ------------------------------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: RNG state, pass rates, fresh-index cursors, known tasks."""
        return {
            "schema_version": SCHEDULER_STATE_VERSION,
            "seed": self.seed,
            "rng": self.rng.bit_generator.state,
            "pass_rates": self.table.to_dict(),
            "streams": {n: {"cursor": s.cursor, "known": [[i, k] for i, k in s.known.items()]}
                        for n, s in self._streams.items()},
            "where": {k: list(v) for k, v in self._where.items()},
            "totals": dict(self._totals),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict()`; a checkpoint of another task mix raises UserError."""
        try:
            if state["schema_version"] != SCHEDULER_STATE_VERSION:
                raise UserError(f"scheduler state version {state['schema_version']} is not supported",
                                field="schedule",
                                fix="resume with the rlvr version that wrote the checkpoint")
            streams = state["streams"]
            if sorted(streams) != sorted(self._streams):
                raise UserError(f"checkpoint was made with domains {sorted(streams)}, this run has "
                                f"{sorted(self._streams)}", field="tasks.train",
                                fix="resume with the same tasks")
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = dict(state["rng"])
            table = PassRateTable(self.config.ema)
            table.load_dict(state["pass_rates"], origin="checkpoint scheduler state")
            restored = {n: (int(s["cursor"]), {int(i): str(k) for i, k in s["known"]}) for n,
                        s in streams.items()}
            where = {str(k): (str(v[0]), int(v[1])) for k, v in state["where"].items()}
            totals = {k: int(state["totals"][k]) for k in self._totals}
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise UserError(f"malformed scheduler state ({type(exc).__name__}: {exc})", field="schedule",
                            fix="resume from an intact checkpoint") from None
        self.rng = rng
        self.table = table
        for n, (cursor, known) in restored.items():
            self._streams[n].cursor, self._streams[n].known = cursor, known
        self._where, self._totals = where, totals
        self._reweigh_all()

    def save_pass_rates(self, path: str | Path) -> Path:
        """Write the pass rates as JSON for a later run (`schedule.pass_rates_from`)."""
        return self.table.save(path)

    def load_pass_rates(self, path: str | Path) -> None:
        """Start from an earlier run's pass rates; tasks it served from a same-named domain become known,
        so procedural domains revisit them and draw fresh indices after them."""
        self.table.load(path)
        pools = {n: set(s.pool) for n, s in self._streams.items() if s.pool is not None}
        for key, stat in self.table.items():
            stream = self._streams.get(stat.source or "")
            if stream is None or stat.index is None or stat.index >= self.heldout_offset:
                continue
            if stream.name in pools and stat.index not in pools[stream.name]:
                continue
            stream.known[stat.index] = key
            self._where[key] = (stream.name, stat.index)
            if stream.pool is None:
                stream.cursor = max(stream.cursor, stat.index + 1)
        self._reweigh_all()


def _apply_budgets(limits: TaskLimits, budgets: Iterable[BudgetConfig | None]) -> TaskLimits:
    update: dict[str, int] = {}
    for budget in budgets:
        if budget is not None:
            update.update({k: v for k, v in budget.model_dump().items() if v is not None})
    return limits.model_copy(update=update) if update else limits


def _unknown(field_name: str, key: str, known: list[str]) -> UserError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
    return UserError(f"unknown name {key!r}", field=field_name, fix=hint)
