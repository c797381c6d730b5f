"""The parts of a training run, built from its RunConfig: policy, sandboxes, scheduler, engine, updater, records."""
from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from rlvr.config import RunConfig
from rlvr.errors import UserError
from rlvr.monitor.monitor import Monitor
from rlvr.rollout.engine import RolloutEngine
from rlvr.rollout.policy import SamplingParams, make_policy
from rlvr.sandbox.base import SandboxPool
from rlvr.scale import pool_for
from rlvr.schedule.scheduler import Scheduler
from rlvr.store import checkpoints as objects
from rlvr.store.episodes import EpisodeStore, step_dir
from rlvr.tasks import registry
from rlvr.tasks.selection import Selection, parse
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task
from rlvr.train.update import PolicyUpdater
from rlvr.verify.base import VerifyContext
from rlvr.verify.verdict import Verdict


class VerdictCache:
    """Verdicts of identical final states of the same task, reused within a run.

    Only deterministic verdicts are kept: none that drew randomised hidden cases (a seed) and none that could
    not be reached (infra_error), so a cached verdict is exactly what verifying again would give.
    """

    def __init__(self) -> None:
        self._verdicts: dict[str, Verdict] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(task: Task, final: FinalState) -> str:
        h = hashlib.sha256()
        h.update(task.model_dump_json().encode())
        h.update(final.model_dump_json().encode())
        return h.hexdigest()

    def get(self, task: Task, final: FinalState) -> Verdict | None:
        v = self._verdicts.get(self.key(task, final))
        if v is None:
            self.misses += 1
        else:
            self.hits += 1
        return v

    def put(self, task: Task, final: FinalState, verdict: Verdict) -> None:
        if verdict.infra_error is None and verdict.seed is None:
            self._verdicts[self.key(task, final)] = verdict


class CachingEngine(RolloutEngine):
    """The rollout engine with a verdict cache in front of the sandboxed verifier (groups of a small policy
    repeat answers often; each distinct final state is still verified once in the sandbox)."""

    def __init__(self, *args: Any, cache: VerdictCache, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.cache = cache

    def _verify(self, live: Any, final: FinalState) -> None:
        hit = self.cache.get(live.task, final)
        if hit is None:
            super()._verify(live, final)
            if live.ep.verdict is not None:
                self.cache.put(live.task, final, live.ep.verdict)
            return
        live.ep.verdict = hit
        live.ep.reward = hit.reward(self.flag_penalty)
        live.ep.metadata["verdict_cached"] = True


@dataclass
class Parts:
    """Everything a run holds while it trains."""

    cfg: RunConfig
    run_url: str
    policy: Any
    """The `hf` policy being trained (its `.model` is updated in place)."""
    pool: SandboxPool
    scheduler: Scheduler
    engine: CachingEngine
    updater: PolicyUpdater
    store: EpisodeStore
    monitor: Monitor
    train_sources: list[TaskSource]
    heldout: list[Task]
    cache: VerdictCache
    progress: Any = None
    extras: dict[str, Any] = field(default_factory=dict)

    def engine_for(self, sampling: SamplingParams, progress: Any = None) -> CachingEngine:
        """Another engine on the same policy, pool and verdict cache (held-out evaluation)."""
        return CachingEngine(self.policy, self.pool, verify_ctx=VerifyContext(pool=self.pool), config=self.cfg.rollout,
                             sampling=sampling, flag_penalty=self.cfg.train.flag_penalty, run_id=self.cfg.name,
                             progress=progress, cache=self.cache)

    def drop_records_after(self, step: int) -> None:
        """Delete stored episodes of steps >= `step` (they are about to be replayed from a checkpoint)."""
        for name in objects.list_names(f"{self.run_url}/episodes"):
            if name.startswith("step=") and name[5:].isdigit() and int(name[5:]) >= step:
                objects.delete(f"{self.run_url}/episodes/{step_dir(int(name[5:]))}")


def sampling_params(cfg: RunConfig) -> SamplingParams:
    return SamplingParams(temperature=cfg.policy.temperature, top_p=cfg.policy.top_p,
                          max_new_tokens=cfg.policy.max_new_tokens)


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


TRAINABLE_BACKENDS = frozenset({"hf", "vllm"})
"""Backends with local weights the trainer can update (vllm generates with a synced copy of them)."""


@contextmanager
def build(cfg: RunConfig, run_url: str, progress: Any = None) -> Iterator[Parts]:
    """Build the run's parts; the sandbox pool and the monitor are closed whatever happens."""
    if cfg.policy.backend not in TRAINABLE_BACKENDS:
        raise UserError(f"training needs a local model; policy.backend is {cfg.policy.backend!r}",
                        field="policy.backend", fix='use backend = "hf" (the openai backend can only be evaluated)')
    with ExitStack() as stack:
        policy = make_policy(cfg.policy)
        if hasattr(policy, "close"):  # vllm: its engine is stopped however the run ends
            stack.callback(policy.close)
        if cfg.train.max_staleness > 0:  # asynchronous: generation samples from a copy the trainer syncs
            policy.separate_weights()
        if cfg.train.lora:
            _apply_lora(policy, cfg)
        pool = pool_for(cfg)  # the local isolated pool, or pool actors on Ray when [cluster] is set
        stack.callback(pool.close)
        scheduler = Scheduler.from_config(cfg, held_out=heldout_indices(cfg))
        cache = VerdictCache()
        engine = CachingEngine(policy, pool, verify_ctx=VerifyContext(pool=pool), config=cfg.rollout,
                               sampling=sampling_params(cfg), flag_penalty=cfg.train.flag_penalty, run_id=cfg.name,
                               cache=cache)
        updater = PolicyUpdater(policy.model, cfg.train, pad_id=policy.pad_id, temperature=cfg.policy.temperature,
                                ref_model=_reference_model(policy, cfg))
        monitor = Monitor(cfg.run_dir, cfg.monitor)
        stack.callback(monitor.close)
        yield Parts(cfg=cfg, run_url=run_url, policy=policy, pool=pool, scheduler=scheduler, engine=engine,
                    updater=updater, store=EpisodeStore(run_url), monitor=monitor,
                    train_sources=[s.source for s in selections(cfg.tasks.train, cfg)],
                    heldout=heldout_tasks(cfg), cache=cache, progress=progress)
