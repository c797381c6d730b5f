"""The parts of a training run, built from its RunConfig: policy, sandboxes, scheduler, engine, updater, records."""
from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from rlvr.config import RunConfig
from rlvr.monitor.monitor import Monitor
from rlvr.rollout.backends import make_policy
from rlvr.rollout.engine import RolloutEngine
from rlvr.rollout.policy import SamplingParams
from rlvr.rollout.trainable import TrainablePolicy, require_trainable
from rlvr.rollout.weights import sync_generation
from rlvr.sandbox.base import SandboxPool
from rlvr.scale import pool_for
from rlvr.schedule.scheduler import Scheduler
from rlvr.store.episodes import EpisodeStore
from rlvr.store.layout import RunLayout
from rlvr.store.retention import Retention
from rlvr.tasks import registry
from rlvr.tasks.selection import Selection, parse
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task
from rlvr.train import distributed
from rlvr.train.distributed import SINGLE, Dist
from rlvr.train.update import PolicyUpdater
from rlvr.verify.scorer import Scorer


@dataclass
class Parts:
    """Everything a run holds while it trains."""

    cfg: RunConfig
    run_url: str
    policy: TrainablePolicy
    """The policy being trained (its `.model` is updated in place)."""
    pool: SandboxPool
    scheduler: Scheduler
    scorer: Scorer
    """The run's one scoring seam: the engine, held-out evaluation and every verdict of the run use it."""
    engine: RolloutEngine
    retention: Retention
    """Which episodes the store keeps."""
    updater: PolicyUpdater
    store: EpisodeStore
    monitor: Monitor
    train_sources: list[TaskSource]
    heldout: list[Task]
    progress: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    dist: Dist = SINGLE
    """This process's rank in the job; only rank 0 samples, stores, monitors and evaluates."""

    def engine_for(self, sampling: SamplingParams, progress: Any = None) -> RolloutEngine:
        """Another engine on the same policy, pool and Scorer (held-out evaluation)."""
        return RolloutEngine(self.policy, self.pool, self.scorer, config=self.cfg.rollout, sampling=sampling,
                             run_id=self.cfg.name, progress=progress)

    def sync_generation(self) -> float | None:
        """Bring the generation weights up to the trainer's when behind (seconds; None: nothing moved). With
        several ranks the sharded weights are gathered into every rank's full copy: a collective."""
        policy = self.policy
        if not self.dist.active or policy.generation_version == policy.version:
            return sync_generation(policy)
        t0 = time.perf_counter()
        policy.sync_weights(distributed.full_weights(policy.model), policy.version)
        return time.perf_counter() - t0

    def drop_records_after(self, step: int) -> None:
        """Delete what was recorded after the checkpoint at `step` (it is about to be replayed from it)."""
        RunLayout(self.run_url).drop_after(step)


def selections(spec: str, cfg: RunConfig) -> list[Selection]:
    """A tasks SPEC resolved with the run's `tasks.domains` settings."""
    out = []
    for sel in parse(spec):
        name = sel.source.name
        if name in cfg.tasks.domains and registry.is_registered(name):
            sel = Selection(registry.make(name, **cfg.tasks.domains[name]), sel.n)
        out.append(sel)
    return out


DEFAULT_HELDOUT_PER_DOMAIN = 200
"""Held-out tasks per procedural training domain when `tasks.heldout` is unset."""


def heldout_spec(cfg: RunConfig) -> str:
    """`tasks.heldout`, or when unset: every procedural domain of `tasks.train` with 200 tasks."""
    if cfg.tasks.heldout is not None:
        return cfg.tasks.heldout
    return ",".join(f"{sel.source.name}:{DEFAULT_HELDOUT_PER_DOMAIN}" for sel in selections(cfg.tasks.train, cfg)
                    if sel.source.size is None)


def heldout_tasks(cfg: RunConfig) -> list[Task]:
    """The held-out set: procedural domains from `tasks.heldout_offset` on, finite ones sampled by seed."""
    spec = heldout_spec(cfg)
    if not spec:
        return []
    tasks: list[Task] = []
    for sel in selections(spec, cfg):
        tasks.extend(sel.tasks(seed=cfg.seed, offset=cfg.tasks.heldout_offset))
    return tasks


def heldout_indices(cfg: RunConfig) -> dict[str, set[int]]:
    """Indices the held-out set takes from each finite source (by source name); training leaves them out."""
    spec = heldout_spec(cfg)
    out: dict[str, set[int]] = {}
    for sel in selections(spec, cfg) if spec else []:
        if sel.source.size is not None:
            out.setdefault(sel.source.name, set()).update(sel.source.indices(sel.n, seed=cfg.seed))
    return out


def _reference_model(policy: Any, cfg: RunConfig) -> Any:
    if cfg.train.kl_coef <= 0 or cfg.train.lora:
        return None  # no KL, or LoRA: the base model with adapters off is the reference
    ref = copy.deepcopy(policy.model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def _apply_lora(policy: Any, cfg: RunConfig) -> None:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=cfg.train.lora_rank, lora_alpha=2 * cfg.train.lora_rank, lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    policy.model = get_peft_model(policy.model, lora)


class _NoMonitor:
    """The monitor of a rank other than 0: rank 0 logs every episode of the step."""

    def log(self, step: int, episodes: list, extra: dict[str, float] | None = None) -> dict[str, float]:
        return {}

    def close(self) -> None:
        return None


@contextmanager
def build(cfg: RunConfig, run_url: str, progress: Any = None, dist: Dist = SINGLE) -> Iterator[Parts]:
    """Build the run's parts; the sandbox pool and the monitor are closed whatever happens. With several ranks
    the policy is sharded (rlvr.train.distributed) and generates from a full copy of its weights."""
    with ExitStack() as stack:
        if cfg.policy.engines:  # the engines are Ray actors on the run's cluster: connect before they start
            from rlvr.rollout.engines import connect

            connect(cfg.cluster.address)
        built = make_policy(cfg.policy)
        if hasattr(built, "close"):  # vllm: its engine is stopped however the run ends
            stack.callback(built.close)
        policy = require_trainable(built, cfg.policy.backend)
        if cfg.train.max_staleness > 0:  # asynchronous: generation samples from a copy the trainer syncs
            policy.separate_weights()
        if cfg.train.lora:
            _apply_lora(policy, cfg)
        ref_model = _reference_model(policy, cfg)
        if dist.active:  # sharded weights cannot generate alone: each rank samples from a full copy
            policy.separate_weights()
            policy.model = distributed.shard(policy.model, dist, cfg.train.mixed_precision)
        pool = pool_for(cfg)  # the local isolated pool, or pool actors on Ray when [cluster] is set
        stack.callback(pool.close)
        scheduler = Scheduler.from_config(cfg, held_out=heldout_indices(cfg))
        scorer = Scorer.from_config(cfg, pool, frames_dir=str(RunLayout(cfg.run_dir).frames))
        engine = RolloutEngine(policy, pool, scorer, config=cfg.rollout,
                               sampling=SamplingParams.from_config(cfg.policy), run_id=cfg.name)
        updater = PolicyUpdater(policy.model, cfg.train, pad_id=policy.pad_id, temperature=cfg.policy.temperature,
                                ref_model=ref_model, dist=dist)
        monitor = Monitor(cfg.run_dir, cfg.monitor) if dist.main else _NoMonitor()
        stack.callback(monitor.close)
        yield Parts(cfg=cfg, run_url=run_url, policy=policy, pool=pool, scheduler=scheduler, scorer=scorer,
                    engine=engine, retention=Retention(cfg.schedule.failed_retention, seed=cfg.seed), updater=updater, store=EpisodeStore(run_url), monitor=monitor,
                    train_sources=[s.source for s in selections(cfg.tasks.train, cfg)],
                    heldout=heldout_tasks(cfg), progress=progress, dist=dist)
