"""One wiring of a run, for train, eval, profile, serve and the trainer adapters alike.

    with run.build(cfg) as r:                      # the pool (local or on Ray), the Scorer, the policy, the
    rollouts
        tasks = run.tasks_of("code:20", cfg)       # a tasks SPEC with the config's [tasks.domains] settings
        episodes = r.rollouts.run(tasks, k, step=0, seed=cfg.seed)
    summary = run.train(cfg)                       # `rlvr train`: the trainer built here, driven by
    train.loop

This module is the only place that maps config sections to constructors: every part below it takes its own
section or plain arguments (`Scorer(pool, retries=..., flag_penalty=...)`, `Scheduler(sources, cfg.schedule,
...)`, the pool from `[sandbox]` and `[cluster]`), and no library layer sees the RunConfig. It decides which
tasks a SPEC names (a domain is built with its `[tasks.domains.<name>]` settings wherever the SPEC is read, so
`rlvr eval --config` sees the tasks training saw), the held-out set and the indices training leaves to it, the
sandbox pool, the one Scorer, the policy (the cluster connected first when its engines are Ray actors), and
the rollout driver, chosen once: the built-in env loop, or the run's agent through the gateway (`[agent]
command`). Whatever a builder opens it closes, however the run ends.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlvr.config import RunConfig
from rlvr.errors import UserError
from rlvr.rollout.core.rollouts import OnEpisode, Progress, Rollouts
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies.backends import make_policy
from rlvr.rollout.policies.gold import GOLD_SAMPLING
from rlvr.rollout.policy import Policy, SamplingParams
from rlvr.sandbox.base import SandboxPool
from rlvr.scale import open_pool
from rlvr.tasks import registry
from rlvr.tasks.selection import Selection, parse
from rlvr.tasks.spec import Task
from rlvr.verify.needs import require
from rlvr.verify.scorer import Scorer

if TYPE_CHECKING:
    from rlvr.train.display import TrainDisplay
    from rlvr.train.distributed import Dist
    from rlvr.train.trainer import Trainer

__all__ = ["DEFAULT_HELDOUT_PER_DOMAIN", "DomainSettings", "Run", "build", "build_trainer", "domains_of",
           "heldout",
           "heldout_indices", "heldout_spec", "heldout_tasks", "open_policy", "selections", "tasks_of",
           "train",
           "validate", "with_policy"]

DEFAULT_HELDOUT_PER_DOMAIN = 200
"""Held-out tasks per procedural training domain when `tasks.heldout` is unset."""


DomainSettings = Mapping[str, Mapping[str, Any]]
"""Settings per domain name, as in a run config's `[tasks.domains]`."""


# ------------------------------------------------------------------------------------------------ tasks
def selections(spec: str, cfg: RunConfig | DomainSettings) -> list[Selection]:
    """A tasks SPEC, each domain built with the run's `[tasks.domains.<name>]` settings (or `cfg` itself, a
    mapping of them)."""
    settings = cfg.tasks.domains if isinstance(cfg, RunConfig) else cfg
    out = []
    for sel in parse(spec):
        name = sel.source.name
        if name in settings and registry.is_registered(name):
            sel = Selection(registry.make(name, **settings[name]), sel.n)
        out.append(sel)
    return out


def domains_of(selected: Iterable[Selection]) -> set[str]:
    """The domains whose tasks the selections hold: a registered domain by name, a pack by its tasks'."""
    out: set[str] = set()
    for sel in selected:
        if registry.is_registered(sel.source.name) or sel.source.size is None:
            out.add(sel.source.name)
        else:
            out.update(t.domain for t in sel.source.sample(None))
    return out


def tasks_of(spec: str, cfg: RunConfig, *, seed: int | None = None, offset: int = 0) -> list[Task]:
    """Every task a SPEC names under the run's domain settings, in a deterministic order (`seed`: default the
    run's; `offset`: where procedural domains start)."""
    tasks: list[Task] = []
    for sel in selections(spec, cfg):
        tasks.extend(sel.tasks(seed=cfg.seed if seed is None else seed, offset=offset))
    return tasks


def heldout_spec(cfg: RunConfig, train: Sequence[Selection] | None = None) -> str:
    """`tasks.heldout`, or when unset: every procedural domain of the training selections (`train`, default
    `tasks.train` read here) with 200 tasks."""
    if cfg.tasks.heldout is not None:
        return cfg.tasks.heldout
    train = selections(cfg.tasks.train, cfg) if train is None else train
    return ",".join(f"{sel.source.name}:{DEFAULT_HELDOUT_PER_DOMAIN}" for sel in train
                    if sel.source.size is None)


def heldout(cfg: RunConfig, train: Sequence[Selection] | None = None) -> tuple[list[Task],
                                                                               dict[str, set[int]]]:
    """The held-out set and the indices it takes from each finite source (by source name), which training
    leaves out: procedural domains from `tasks.heldout_offset` on, finite ones sampled by seed."""
    spec = heldout_spec(cfg, train)
    tasks: list[Task] = []
    indices: dict[str, set[int]] = {}
    for sel in selections(spec, cfg) if spec else []:
        tasks.extend(sel.tasks(seed=cfg.seed, offset=cfg.tasks.heldout_offset))
        if sel.source.size is not None:
            indices.setdefault(sel.source.name, set()).update(sel.source.indices(sel.n, seed=cfg.seed))
    return tasks, indices


def heldout_tasks(cfg: RunConfig) -> list[Task]:
    """The held-out set of `heldout`."""
    return heldout(cfg)[0]


def heldout_indices(cfg: RunConfig) -> dict[str, set[int]]:
    """The held-out indices of finite sources of `heldout`."""
    return heldout(cfg)[1]


# ------------------------------------------------------------------------------------------ every run
def with_policy(cfg: RunConfig, spec: str | None) -> RunConfig:
    """`cfg` with its policy's backend and model from a policy SPEC (`hf:PATH`, `openai:URL#MODEL`, ...; the
    rest of `[policy]` stays); `cfg` itself for None."""
    if not spec:
        return cfg
    from rlvr.rollout.policies.backends import parse_spec

    backend, target = parse_spec(spec)
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"backend": backend,
                                                                          "model": target})})


def open_policy(cfg: RunConfig, stack: ExitStack, *, seed: int | None = None) -> Policy:
    """The run's policy from `[policy]`, closed with `stack` (a vllm engine is stopped however the run ends).
    When its engines are Ray actors, the cluster is connected first."""
    policy_cfg = cfg.policy
    if policy_cfg.engines:
        from rlvr.scale.cluster import connect

        connect(cfg.cluster.address)
        # the engines load the run's adapters: LoRA sync
        if cfg.train.lora and not policy_cfg.engine_lora_rank:
            policy_cfg = policy_cfg.model_copy(update={"engine_lora_rank": cfg.train.lora_rank})
    policy = make_policy(policy_cfg) if seed is None else make_policy(policy_cfg, seed=seed)
    if hasattr(policy, "close"):
        stack.callback(policy.close)
    return policy


@dataclass
class Run:
    """The built parts of a run that every caller shares."""

    cfg: RunConfig
    pool: SandboxPool
    """Where tools and verification run: local, or pool actors on the cluster."""
    scorer: Scorer
    """The run's one scoring seam."""
    policy: Policy | None = None
    """The policy (None for the adapters, whose trainer brings its own)."""
    rollouts: Rollouts | None = None
    """Who plays the episodes, chosen once: the env loop on the policy, or the run's agent through the gateway
    (`[agent] command`); None without a policy."""

    def gold(self, policy: Policy, progress: Progress | None = None) -> EnvRollouts:
        """The env loop on a gold policy (`rlvr.rollout.policies.gold`): its turns are given, never cut but by
        the task's own budget."""
        return EnvRollouts(policy, self.pool, self.scorer, config=self.cfg.rollout, sampling=GOLD_SAMPLING,
                           run_id=self.cfg.name, progress=progress)


@contextmanager
def build(cfg: RunConfig, *, policy: Policy | bool = True, seed: int | None = None,
          pool: SandboxPool | None = None, progress: Progress | None = None,
          on_episode: OnEpisode | None = None, domains: Iterable[str] = (),
          **scorer_extras: Any) -> Iterator[Run]:
    """Build a run's pool, Scorer, policy (with `policy=True`; a Policy given is used as it is: the trainer
    prepares its own; `False` builds none) and rollout driver (`progress` and `on_episode` are its callbacks)
    from `cfg`. `pool` is borrowed instead of opening the run's own. `domains`: those the run's tasks come
    from, whose needs (`Domain.needs`) the pool's interpreter must meet: a run that lacks one is refused here,
    in one line, before any episode runs. `scorer_extras` reach the verifiers
    (`frames_dir`). Closed on exit, however it ends."""
    with ExitStack() as stack:
        made: Policy | None
        if policy is True:
            made = open_policy(cfg, stack, seed=seed)
        elif policy is False:
            made = None
        else:
            made = policy
        if pool is None:
            pool = open_pool(cfg.sandbox, cfg.cluster)  # local, or pool actors on Ray when [cluster] is set
            stack.callback(pool.close)
        require(pool, domains)  # after the policy: its engines connect the cluster first
        scorer = Scorer(pool, retries=cfg.rollout.infra_retries, flag_penalty=cfg.train.flag_penalty,
                        extras=scorer_extras)
        rollouts: Rollouts | None = None
        sampling = SamplingParams.from_config(cfg.policy)
        if made is not None and cfg.agent.command:
            rollouts = _agent_rollouts(cfg, made, scorer, sampling, stack, progress, on_episode)
        elif made is not None:
            rollouts = EnvRollouts(made, pool, scorer, config=cfg.rollout, sampling=sampling, run_id=cfg.name,
                                   progress=progress, on_episode=on_episode)
        yield Run(cfg=cfg, pool=pool, scorer=scorer, policy=made, rollouts=rollouts)


def _agent_rollouts(cfg: RunConfig, policy: Policy, scorer: Scorer, sampling: SamplingParams,
                    stack: ExitStack,
                    progress: Progress | None, on_episode: OnEpisode | None) -> Rollouts:
    """The run's agents: a gateway in front of `policy` and an isolated pool on the agent's interpreter
    (`[agent] python`), both closed with `stack`; each episode runs `[agent] command` within `[rollout]`
    max_turns and max_tokens, scored by the run's Scorer."""
    from rlvr.rollout.gateway.agents import AgentRollouts, agent_python
    from rlvr.rollout.gateway.core import Gateway
    from rlvr.sandbox import make_pool

    _refuse_for_agents(cfg)  # one line, exit 2, before any sandbox starts
    gateway = Gateway(policy, sampling)
    stack.callback(gateway.close)
    python = agent_python(cfg.agent)
    pool = make_pool(cfg.sandbox, workers=cfg.agent.concurrency, warm=(), spares=0,
                     **({"python": python} if python else {}))
    stack.callback(pool.close)
    rollouts = AgentRollouts(gateway, pool, scorer, cfg.agent, run_id=cfg.name,
                             max_turns=cfg.rollout.max_turns,
                             max_tokens=cfg.rollout.max_tokens, progress=progress, on_episode=on_episode)
    stack.callback(rollouts.close)  # the gateways of `with_sampling`
    return rollouts


def _refuse_for_agents(cfg: RunConfig, ranks: int = 1) -> None:
    """What agents as the policy of a run do not support, refused in one line (UserError, exit 2): several
    ranks, asynchronous training, a cluster, a sandbox other than the local isolated one."""
    if not cfg.agent.command:
        return
    from rlvr.rollout.gateway.agents import check_agent

    check_agent(cfg.agent)
    if ranks > 1:
        raise UserError(f"agents ([agent] command) train on one rank only, not {ranks}",
                        field="train.world_size",
                        fix="set train.world_size = 1 and launch one process")
    if cfg.train.max_staleness > 0:
        raise UserError("agents ([agent] command) train synchronously only", field="train.max_staleness",
                        fix="set train.max_staleness = 0")
    if cfg.cluster.address:
        raise UserError("agents ([agent] command) run in the local sandbox only, not on a cluster",
                        field="cluster.address", fix="remove [cluster] address (and --cluster)")
    if cfg.sandbox.isolation != "bwrap":
        raise UserError(f"agents run in the isolated sandbox only, not isolation = {cfg.sandbox.isolation!r}",
                        field="sandbox.isolation", fix='set [sandbox] isolation = "bwrap"')


# ------------------------------------------------------------------------------------------------ training
def validate(cfg: RunConfig) -> None:
    """Refuse a bad training config before anything is built or written: the update's names resolve, the
    dtype fits the precision, the SFT file exists, and agents and recovery samples run where they can (on as
    many ranks as a launcher started, else `train.world_size`)."""
    from pathlib import Path

    from rlvr.train import distributed
    from rlvr.train.update import check_settings

    launched = distributed.launch_env()
    ranks = int(launched["WORLD_SIZE"]) if launched else (cfg.train.world_size or 1)

    check_settings(cfg.train)
    if cfg.train.mixed_precision != "no" and cfg.policy.dtype != "float32":
        raise UserError(f"mixed_precision = {cfg.train.mixed_precision!r} keeps float32 weights "
                        f"and optimizer state, but policy.dtype is {cfg.policy.dtype!r}",
                        field="train.mixed_precision",
                        fix='set policy.dtype = "float32", or mixed_precision = "no" to train in that dtype')
    if cfg.sft.enabled and cfg.sft.source not in ("reference", "gold") and not Path(cfg.sft.source).is_file():
        raise UserError("no such SFT file", file=cfg.sft.source, field="sft.source",
                        fix='give a JSONL file of {prompt, completion} records, "reference" or "gold"')
    _refuse_for_agents(cfg, ranks)  # agents: one rank, synchronous, the local isolated sandbox


@contextmanager
def build_trainer(cfg: RunConfig, run_url: str, display: TrainDisplay | None = None,
                  dist: Dist | None = None) -> Iterator[Trainer]:
    """A training run's parts (`rlvr.train.trainer.Trainer`) from `cfg`: every run's (`build`) and what only
    training adds (LoRA, the reference model, sharding, the scheduler, the updater, the store, the monitor,
    the checkpoints, recovery samples). With several ranks the policy is sharded (rlvr.train.distributed) and
    generates from a full copy of its weights. The sandbox pool and the monitor are closed whatever
    happens."""
    from rlvr.monitor.monitor import Monitor
    from rlvr.rollout.policies.trainable import require_trainable
    from rlvr.schedule.scheduler import Scheduler
    from rlvr.store.episodes import EpisodeStore
    from rlvr.store.layout import RunLayout
    from rlvr.store.retention import Retention
    from rlvr.train import distributed
    from rlvr.train.checkpoint import Checkpoints
    from rlvr.train.distributed.engines import EngineSync, rank_config, with_engines
    from rlvr.train.recovery import RecoveryMixer
    from rlvr.train.trainer import Heldout, NoMonitor, Trainer
    from rlvr.train.truncation import Truncation
    from rlvr.train.update import PolicyUpdater, apply_lora, reference_model

    dist = dist or distributed.SINGLE
    with ExitStack() as stack:
        policy = require_trainable(open_policy(rank_config(cfg, dist), stack), cfg.policy.backend)
        if cfg.train.max_staleness > 0:  # asynchronous: generation samples from a copy the trainer syncs
            policy.separate_weights()
        if cfg.train.lora:
            apply_lora(policy, cfg.train.lora_rank)
        ref_model = reference_model(policy, cfg.train.kl_coef, cfg.train.lora)
        # sharded weights cannot generate alone: each rank samples from a full copy, or rank 0 from the
        # engines
        engines = EngineSync.before_sharding(policy, dist) if with_engines(cfg, dist) else None
        if dist.active:
            if engines is None:
                policy.separate_weights()
            policy.model = distributed.shard(policy.model, dist, cfg.train.mixed_precision)
        train = selections(cfg.tasks.train, cfg)  # the train spec, read once
        heldout_set, held_out = heldout(cfg, train)
        built = stack.enter_context(build(cfg, policy=policy, frames_dir=str(RunLayout(cfg.run_dir).frames),
                                          domains=domains_of(train) | {t.domain for t in heldout_set}))
        assert built.rollouts is not None  # built with a policy
        scheduler = Scheduler(list(train), cfg.schedule, seed=cfg.seed,
                              heldout_offset=cfg.tasks.heldout_offset,
                              held_out=held_out)
        updater = PolicyUpdater(policy.model, cfg.train, pad_id=policy.pad_id,
                                temperature=cfg.policy.temperature,
                                ref_model=ref_model, dist=dist)
        monitor = Monitor(cfg.run_dir, cfg.monitor) if dist.main else NoMonitor()
        stack.callback(monitor.close)
        checkpoints = Checkpoints(cfg, run_url, dist)
        checkpoints.attach(policy, updater, scheduler)
        trainer = Trainer(cfg=cfg, run_url=run_url, policy=policy, pool=built.pool, scorer=built.scorer,
                          rollouts=built.rollouts, gold=built.gold, scheduler=scheduler, updater=updater,
                          store=EpisodeStore(run_url),
                          retention=Retention(cfg.schedule.failed_retention, seed=cfg.seed),
                          monitor=monitor, checkpoints=checkpoints, train_sources=[s.source for s in train],
                          heldout=Heldout(heldout_set, heldout_spec(cfg, train)), display=display, dist=dist,
                          engines=engines)
        trainer.truncation = Truncation(cfg.train.truncation, cfg.train.overlong_buffer,
                                        cfg.train.overlong_penalty)
        trainer.recovery = RecoveryMixer(policy, cfg.sft, built.gold, heldout=trainer.heldout.keys, dist=dist)
        yield trainer


def train(cfg: RunConfig, resume: bool = True) -> dict[str, Any]:
    """`rlvr train`: train as `cfg` says (no config: the quickstart); returns the summary written to
    `summary.json`. Ranks launched by torchrun each call it; `--cluster` with world_size > 1 starts them on
    Ray."""
    import torch
    from rich.console import Console

    from rlvr.train import distributed, loop
    from rlvr.train.checkpoint import Checkpoints
    from rlvr.train.display import TrainDisplay
    from rlvr.train.distributed.engines import refuse_ray_launch

    t_start = time.perf_counter()
    validate(cfg)
    if distributed.ray_launch(cfg):  # `--cluster` with world_size > 1: Ray starts the ranks, each runs this
        refuse_ray_launch(cfg)
        return distributed.run_on_ray(train, cfg, resume)
    dist = distributed.init(cfg)  # a bad world size, backend or launch is refused before any work
    try:
        run_url = cfg.store.url or str(cfg.run_dir)
        start = Checkpoints(cfg, run_url, dist).start(resume)
        torch.manual_seed(cfg.seed)
        console = None if dist.main else Console(quiet=True)  # one progress display: rank 0's
        with TrainDisplay(cfg, console=console) as display, build_trainer(cfg, run_url, display,
                                                                          dist) as trainer:
            summary = loop.train(trainer, start, t_start)
        if dist.main:
            display.final(summary)
        return summary
    finally:
        dist.close()
