"""The parts of a training run, built from its RunConfig: what every run has (tasks, pool, policy, Scorer, engine:
`rlvr.run.build`), and what only training adds (LoRA, the reference model, sharding, the scheduler, the updater,
the store and the monitor)."""
from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr import run
from rlvr.config import RunConfig
from rlvr.monitor.monitor import Monitor
from rlvr.rollout.agents import AgentRunner, agent_runner
from rlvr.rollout.engine import RolloutEngine
from rlvr.rollout.gold import GOLD_SAMPLING
from rlvr.rollout.policy import SamplingParams
from rlvr.rollout.trainable import TrainablePolicy, require_trainable
from rlvr.rollout.weights import sync_generation
from rlvr.sandbox.base import SandboxPool
from rlvr.schedule.scheduler import Scheduler
from rlvr.store.episodes import EpisodeStore
from rlvr.store.layout import RunLayout
from rlvr.store.retention import Retention
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task
from rlvr.train import distributed
from rlvr.train.distributed import SINGLE, Dist
from rlvr.train.distributed.engines import EngineSync, rank_config, with_engines
from rlvr.train.recovery import RecoveryMixer
from rlvr.train.update import PolicyUpdater
from rlvr.verify.scorer import Scorer


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS has one, else the machine's count)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return max(len(affinity(0)) if affinity else (os.cpu_count() or 1), 1)


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
    engine: RolloutEngine | AgentRunner
    """Who plays the rollouts: the built-in env loop, or the run's agent through the gateway (`[agent] command`)."""
    retention: Retention
    """Which episodes the store keeps."""
    updater: PolicyUpdater
    store: EpisodeStore
    monitor: Monitor
    train_sources: list[TaskSource]
    heldout: list[Task]
    heldout_spec: str = ""
    """The tasks SPEC `heldout` was read from (`tasks.heldout`, or the default of the training domains)."""
    progress: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    dist: Dist = SINGLE
    """This process's rank in the job; only rank 0 samples, stores, monitors and evaluates."""
    recovery: RecoveryMixer | None = None
    """Recovery samples from the run's failures, every `sft.recovery_every` steps (`rlvr.train.recovery`)."""
    engines: EngineSync | None = None
    """Engine actors with several ranks: every rank's part in feeding them (rlvr.train.distributed.engines)."""

    def engine_for(self, sampling: SamplingParams, progress: Any = None,
                   policy: Any = None) -> RolloutEngine | AgentRunner:
        """Another engine on the same pool and Scorer, on the policy or `policy` (held-out evaluation, and the
        gold policy that plays reference trajectories). With an agent, the policy's episodes are the agent's."""
        if policy is None and isinstance(self.engine, AgentRunner):
            return self.engine.with_sampling(sampling, progress)
        return RolloutEngine(policy or self.policy, self.pool, self.scorer, config=self.cfg.rollout,
                             sampling=sampling, run_id=self.cfg.name, progress=progress)

    def gold_engine(self, policy: Any) -> RolloutEngine:
        """The run's engine on a gold policy (`rlvr.rollout.gold`): its turns are given, never cut but by the
        task's own budget."""
        return self.engine_for(GOLD_SAMPLING, policy=policy)

    def sync_generation(self) -> float | None:
        """Bring the generation weights up to the trainer's when behind (seconds; None: nothing moved). With
        several ranks the sharded weights are gathered into every rank's full copy (with engine actors, into rank 0's,
        which syncs the engines from it): a collective."""
        policy = self.policy
        if self.engines is not None:  # several ranks, engine actors: rank 0 syncs them from the gathered weights
            return self.engines.sync(policy)
        if not self.dist.active or policy.generation_version == policy.version:
            return sync_generation(policy)
        t0 = time.perf_counter()
        policy.sync_weights(distributed.full_weights(policy.model), policy.version)
        return time.perf_counter() - t0

    def training_threads(self, beside_rollout: bool = False) -> int:
        """torch CPU threads for the trainer's compute (`train.threads`; unset: every CPU this process may use
        on one rank, `policy.threads` on several or when a rollout runs `beside_rollout`)."""
        cfg = self.cfg
        if cfg.train.threads:
            return cfg.train.threads
        if self.dist.active or beside_rollout:
            return cfg.policy.threads
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

    def drop_records_after(self, step: int) -> None:
        """Delete what was recorded after the checkpoint at `step` (it is about to be replayed from it)."""
        RunLayout(self.run_url).drop_after(step)


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
        policy = require_trainable(run.open_policy(rank_config(cfg, dist), stack), cfg.policy.backend)
        if cfg.train.max_staleness > 0:  # asynchronous: generation samples from a copy the trainer syncs
            policy.separate_weights()
        if cfg.train.lora:
            _apply_lora(policy, cfg)
        ref_model = _reference_model(policy, cfg)
        # sharded weights cannot generate alone: each rank samples from a full copy, or rank 0 from the engines
        engines = EngineSync.before_sharding(policy, dist) if with_engines(cfg, dist) else None
        if dist.active:
            if engines is None:
                policy.separate_weights()
            policy.model = distributed.shard(policy.model, dist, cfg.train.mixed_precision)
        built = stack.enter_context(run.build(cfg, policy=policy, frames_dir=str(RunLayout(cfg.run_dir).frames)))
        train = run.selections(cfg.tasks.train, cfg)  # the train spec, read once
        heldout, held_out = run.heldout(cfg, train)
        scheduler = Scheduler.from_config(cfg, train, held_out=held_out)
        updater = PolicyUpdater(policy.model, cfg.train, pad_id=policy.pad_id, temperature=cfg.policy.temperature,
                                ref_model=ref_model, dist=dist)
        monitor = Monitor(cfg.run_dir, cfg.monitor) if dist.main else _NoMonitor()
        stack.callback(monitor.close)
        engine: RolloutEngine | AgentRunner = built.engine()
        if cfg.agent.command:  # the agent plays the rollouts, through a gateway in front of the policy
            engine = agent_runner(cfg, policy, built.scorer, SamplingParams.from_config(cfg.policy), stack)
        parts = Parts(cfg=cfg, run_url=run_url, policy=policy, pool=built.pool, scheduler=scheduler,
                      scorer=built.scorer, engine=engine,
                      retention=Retention(cfg.schedule.failed_retention, seed=cfg.seed), updater=updater,
                      store=EpisodeStore(run_url), monitor=monitor,
                      train_sources=[s.source for s in train],
                      heldout=heldout, heldout_spec=run.heldout_spec(cfg, train), progress=progress, dist=dist,
                      engines=engines)
        parts.recovery = RecoveryMixer(policy, cfg.sft, parts.gold_engine, heldout={t.key for t in heldout})
        yield parts
