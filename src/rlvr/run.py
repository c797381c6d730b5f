"""One wiring of a run, for train, eval, profile, serve and the trainer adapters alike.

    with run.build(cfg) as r:                      # the pool (local or on Ray), the Scorer, the policy
        tasks = run.tasks_of("code:20", cfg)       # a tasks SPEC with the config's [tasks.domains] settings
        episodes = r.engine().run(tasks, k, step=0, seed=cfg.seed)

Everything a run is made of is decided here, from its RunConfig: which tasks a SPEC names (a domain is built
with its `[tasks.domains.<name>]` settings wherever the SPEC is read, so `rlvr eval --config` sees the tasks
training saw), the held-out set and the indices training leaves to it, the sandbox pool (`[sandbox]`, or pool
actors on the `[cluster]`), the one Scorer (retries, flag penalty, verdict cache), the policy (`[policy]`, with
the cluster connected first when its engines are Ray actors) and the rollout engine (`[rollout]` and the
policy's sampling). Whatever the builder opens it closes, however the run ends.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from rlvr.config import RunConfig
from rlvr.rollout.backends import make_policy
from rlvr.rollout.engine import RolloutEngine
from rlvr.rollout.episode import Episode
from rlvr.rollout.policy import Policy, SamplingParams
from rlvr.sandbox.base import SandboxPool
from rlvr.scale import pool_for
from rlvr.tasks import registry
from rlvr.tasks.selection import Selection, parse
from rlvr.tasks.spec import Task
from rlvr.verify.scorer import Scorer

__all__ = ["DEFAULT_HELDOUT_PER_DOMAIN", "DomainSettings", "Run", "build", "heldout", "heldout_indices", "heldout_spec", "heldout_tasks",
           "open_policy", "selections", "tasks_of"]

DEFAULT_HELDOUT_PER_DOMAIN = 200
"""Held-out tasks per procedural training domain when `tasks.heldout` is unset."""


DomainSettings = Mapping[str, Mapping[str, Any]]
"""Settings per domain name, as in a run config's `[tasks.domains]`."""


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
    return ",".join(f"{sel.source.name}:{DEFAULT_HELDOUT_PER_DOMAIN}" for sel in train if sel.source.size is None)


def heldout(cfg: RunConfig, train: Sequence[Selection] | None = None) -> tuple[list[Task], dict[str, set[int]]]:
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


def open_policy(cfg: RunConfig, stack: ExitStack, *, seed: int | None = None) -> Policy:
    """The run's policy from `[policy]`, closed with `stack` (a vllm engine is stopped however the run ends).
    When its engines are Ray actors, the cluster is connected first."""
    policy_cfg = cfg.policy
    if policy_cfg.engines:
        from rlvr.scale.cluster import connect

        connect(cfg.cluster.address)
        if cfg.train.lora and not policy_cfg.engine_lora_rank:  # the engines load the run's adapters: LoRA sync
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
    extras: dict[str, Any] = field(default_factory=dict)

    def engine(self, *, sampling: SamplingParams | None = None, on_episode: Callable[[Episode], None] | None = None,
               progress: Any = None, policy: Policy | None = None) -> RolloutEngine:
        """A rollout engine on the run's policy (or `policy`: a gold policy playing references), pool and Scorer,
        with `[rollout]` and the policy's sampling."""
        policy = policy or self.policy
        if policy is None:
            raise ValueError("this run was built without a policy")
        return RolloutEngine(policy, self.pool, self.scorer, config=self.cfg.rollout,
                             sampling=sampling or SamplingParams.from_config(self.cfg.policy), run_id=self.cfg.name,
                             on_episode=on_episode, progress=progress)


@contextmanager
def build(cfg: RunConfig, *, policy: Policy | bool = True, seed: int | None = None,
          pool: SandboxPool | None = None, **scorer_extras: Any) -> Iterator[Run]:
    """Build a run's pool, Scorer and (with `policy=True`) its policy from `cfg`; a Policy given is used as it
    is (the trainer prepares its own: LoRA, sharding), `False` builds none. `pool` is borrowed instead of
    opening the run's own. `scorer_extras` reach the verifiers (`frames_dir`). Closed on exit, however it ends.
    """
    with ExitStack() as stack:
        made: Policy | None
        if policy is True:
            made = open_policy(cfg, stack, seed=seed)
        elif policy is False:
            made = None
        else:
            made = policy
        if pool is None:
            pool = pool_for(cfg)  # the local isolated pool, or pool actors on Ray when [cluster] is set
            stack.callback(pool.close)
        yield Run(cfg=cfg, pool=pool, scorer=Scorer.from_config(cfg, pool, **scorer_extras), policy=made)
