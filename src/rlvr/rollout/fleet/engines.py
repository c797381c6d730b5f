"""Disaggregated generation (`[policy] engines = K`): the trainer's side of a fleet of vLLM engines as Ray
actors, fed the trainer's weights after each update over a torch.distributed group of their own.

What runs where. The trainer's process holds an `EnginesPolicy`: the tokenizer, the transformers model it
updates (`.model`) and the policy versions, exactly as `VLLMPolicy` does (it is one), but no engine. Each
engine is an `EngineActor` (rlvr.rollout.fleet.actor) on some Ray node, held by an `EnginePool`
(rlvr.rollout.fleet.members) that places and starts it through rlvr.scale.cluster. A generate call renders the
prompts in the trainer, sends each engine its share as token ids (a conversation's group, the samples of one
task, stays on one engine while the weights do not change, so their shared prompt is prefilled once) and waits
for all of them.

Weight sync (`sync_weights`) sends what changed (rlvr.rollout.fleet.weight_sync): under LoRA, with engines
started with `lora_rank`, only the adapter, which each engine loads with vLLM's LoRA support; otherwise the
trainer's weights (LoRA merged; a tied weight once), skipping the blocks whose frozen tensors the engines
already hold. The tensor names, dtypes and shapes go through Ray (a control message), the bytes by broadcast
in buckets.

A lost engine (its actor killed, its node gone) costs no episode: its share of the generate call in flight is
run again on the engines left (when none is left, those conversations get an error completion: an infra fault,
retried by the rollout engine, never charged to the policy), and a replacement starts in the background on
whatever the cluster can place. A started engine is admitted only at a sync, or before a generate call in
synchronous mode (where the trainer's weights are the engines' version): the weight-sync group is rebuilt over
the new membership and the new engine receives the current weights in full before any request reaches it. A
sync that fails because an engine died is retried once over the engines left.

Scaling (`engines_min` <= `engines` <= `engines_max`). A generate call that waited longer than
`scale_up_wait_s` from its arrival to its completions, with the fleet below `engines_max` and no start under
way, raises the target by one: the autoscaler is asked for the engines' resources (`cluster.want`), and the
engine starts as soon as a node can place it, without blocking generation. An engine idle for
`scale_down_idle_s` with the fleet above `engines_min` is stopped. Each change of the serving fleet is a
`ScaleEvent` in `scale_events`.

Versions and staleness are VLLMPolicy's: `version` is the trainer's, `engine_version` the one every engine
holds (all engines sync together, under the lock that also guards generate), `generate()` syncs first when
they differ unless `separate_weights()` turned that off (asynchronous mode), and every completion records the
version its engine reported, which must be `engine_version`.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.envs.messages import Message
from rlvr.errors import InfraError, UserError
from rlvr.rollout.core.tokens import AUTO
from rlvr.rollout.fleet.members import START_TIMEOUT_S, EnginePool, Member
from rlvr.rollout.fleet.weight_sync import (
    GROUP_TIMEOUT_S,
    Changes,
    adapter_weights,
    base_weights,
    frozen_mask,
    is_adapter_model,
    tensor_aliases,
    tensor_meta,
)
from rlvr.rollout.policies.vllm import VLLMPolicy
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.scale import cluster

if TYPE_CHECKING:
    from rlvr.config import PolicyConfig

STICKY_LIMIT = 100_000
"""Group keys remembered per weight version (the map is cleared at each sync and when it grows past this)."""


@dataclass(frozen=True)
class ScaleEvent:
    """One change of the serving fleet, for the monitor."""

    time: float
    """Unix time."""
    before: int
    """Engines serving before."""
    after: int
    """Engines serving after."""
    reason: str


# ------------------------------------------------------------------------------------ sharing a batch
def group_key(conversation: Sequence[Message], index: int) -> str:
    """What the samples of one group share: the conversation up to its first user message (the task
    prompt)."""
    head: list[str] = []
    for m in conversation:
        head.append(f"{m.role}\x00{m.content}")
        if m.role == "user":
            return hashlib.sha1("\x01".join(head).encode()).hexdigest()
    return f"#{index}"  # no user message: nothing to share


def assign(keys: Sequence[str], engines: int, sticky: dict[str, int]) -> list[int]:
    """The engine of each conversation: a key seen before keeps its engine, a new key goes to the engine with
    the fewest conversations in this call (new keys are remembered in `sticky`)."""
    counts = Counter(keys)
    load = [0] * engines
    for key, count in counts.items():
        if key in sticky:
            load[sticky[key]] += count
    for key, count in counts.items():  # in order of first appearance
        if key not in sticky:
            sticky[key] = min(range(engines), key=lambda e: (load[e], e))
            load[sticky[key]] += count
    return [sticky[key] for key in keys]


def shares(where: Sequence[int], params: SamplingParams) -> list[tuple[int, list[int], SamplingParams]]:
    """(engine, indices, sampling) of each engine's part of a call: each part keeps its conversations' own
    seeds and budgets, so a stream does not depend on how a batch was split (`params.seeds` must be set)."""
    assert params.seeds is not None
    out = []
    for e in sorted(set(where)):
        idx = [i for i, w in enumerate(where) if w == e]
        out.append((e, idx, replace(params, seeds=tuple(params.seeds[i] for i in idx),
                                    budgets=None if params.budgets is None
                                    else tuple(params.budgets[i] for i in idx))))
    return out


def fleet_bounds(engines: int, engines_min: int | None, engines_max: int | None) -> tuple[int, int]:
    """(min, max) of the fleet, refusing in one line bounds that do not hold `engines` (unset: `engines`)."""
    lo = engines if engines_min is None else engines_min
    hi = engines if engines_max is None else engines_max
    if lo < 1:
        raise UserError(f"engines_min = {lo}", field="policy.engines_min", fix="set it to at least 1")
    if lo > engines:
        raise UserError(f"engines_min = {lo} is above engines = {engines}", field="policy.engines_min",
                        fix="start with at least engines_min engines, or lower engines_min")
    if hi < engines:
        raise UserError(f"engines_max = {hi} is below engines = {engines}", field="policy.engines_max",
                        fix="raise engines_max, or start with fewer engines")
    return lo, hi


class EnginesPolicy(VLLMPolicy):
    """The trainer's side of disaggregated generation (see the module docstring)."""

    def __init__(self, model_path_or_name: str | Path, *, engines: int = 1, engine_tp: int = 1,
                 engines_min: int | None = None, engines_max: int | None = None, lora_rank: int = 0,
                 scale_up_wait_s: float | None = None, scale_down_idle_s: float | None = None,
                 address: str | None = None, dtype: str = "float32", max_context: int | None = None,
                 device: str = "auto", kv_cache_mb: int | None = 512, seed: int = 0,
                 trust_remote_code: bool = False,
                 chat_template: str = AUTO, tool_format: str = AUTO) -> None:
        if engines < 1 or engine_tp < 1:
            raise UserError(f"engines = {engines}, engine_tp = {engine_tp}", field="policy.engines",
                            fix="both must be at least 1")
        self.engines_min, self.engines_max = fleet_bounds(engines, engines_min, engines_max)
        self.engines, self.engine_tp, self.chat_template, self.lora_rank = (engines, engine_tp, chat_template,
                                                                            lora_rank)
        self.target = engines
        """Engines the fleet keeps (replacing lost ones); scaling moves it between engines_min and
        engines_max."""
        self.scale_up_wait_s, self.scale_down_idle_s = scale_up_wait_s, scale_down_idle_s
        self.scale_events: list[ScaleEvent] = []
        """Every change of the serving fleet, in order."""
        self.sync_bytes: list[int] = []
        """Payload bytes broadcast by each weight sync, in order (with `sync_seconds`)."""
        self.engine_sync_seconds: list[float] = []
        """The slowest engine's receive-and-load seconds of each sync."""
        self.waits: list[float] = []
        """Seconds from each generate call's arrival to its completions."""
        self._ray = cluster.import_ray("policy.engines", field="policy.engines")
        cluster.connect(address, needs="policy.engines")
        self._gpus = self._placement(device)
        self._pool: EnginePool | None = None
        self._ready: list[tuple[Member, str]] = []  # started, waiting for a point where they can be synced
        self._sticky: dict[str, int] = {}
        self._changes = Changes()
        # the engines' base weights are the model directory's (what LoRA adapters sit on)
        self._base_held = True
        self._requested = 0
        super().__init__(model_path_or_name, dtype=dtype, max_context=max_context, device=device,
                         kv_cache_mb=kv_cache_mb, seed=seed, trust_remote_code=trust_remote_code,
                         chat_template=chat_template, tool_format=tool_format)

    @classmethod
    def from_config(cls, target: str, cfg: PolicyConfig, **kw: Any) -> EnginesPolicy:
        """The policy of `[policy]` with `engines` set (`kw`: the options every vllm policy takes)."""
        return cls(target, engines=cfg.engines, engine_tp=cfg.engine_tp, engines_min=cfg.engines_min,
                   engines_max=cfg.engines_max, lora_rank=cfg.engine_lora_rank,
                   scale_up_wait_s=cfg.scale_up_wait_s,
                   scale_down_idle_s=cfg.scale_down_idle_s, **kw)

    def _placement(self, device: str) -> int:
        """GPUs per engine (0: CPU engines), refusing what the cluster cannot place."""
        gpu = device != "cpu" and cluster.resources().get("GPU", 0) > 0
        if device.startswith("cuda") and not gpu:
            raise UserError(f"policy.device = {device!r} but the Ray cluster has no GPUs",
                            field="policy.device",
                            fix='use device = "auto" or "cpu", or add GPU nodes')
        if self.engine_tp > 1 and not gpu:
            raise UserError(f"engine_tp = {self.engine_tp} needs CUDA GPUs, which this cluster does not have",
                            field="policy.engine_tp", fix="use engine_tp = 1 on CPU")
        for n, name in ((self.engines_min, "engines_min"), (self.engines, "engines")):
            cluster.require("GPU" if gpu else "CPU", n * self.engine_tp if gpu else n, what=f"{n} engines",
                            field=f"policy.{name}", fix=f"lower policy.{name} or add nodes")
        return self.engine_tp if gpu else 0

    def _start_engine(self, path: Path, dtype: str, device: str, kv_cache_mb: int | None, seed: int) -> Any:
        """Start the engine actors (called by VLLMPolicy.__init__ in place of its in-process engine)."""
        options = {"dtype": dtype, "max_context": self.max_context,
                   "device": "cpu" if not self._gpus else device,
                   "kv_cache_mb": kv_cache_mb, "seed": seed, "trust_remote_code": self.trust_remote_code,
                   "chat_template": self.chat_template, "engine_tp": self.engine_tp,
                   "lora_rank": self.lora_rank, "tool_format": self.tool_format}
        self._pool = EnginePool(path, options, gpus=self._gpus, engine_tp=self.engine_tp)
        self._pool.start(self.engines, timeout_s=START_TIMEOUT_S)
        return None  # no engine in this process

    @property
    def pool(self) -> EnginePool:
        assert self._pool is not None
        return self._pool

    @property
    def info(self) -> list[dict[str, Any]]:
        """What each serving engine reported at start: node, node id, GPU ids."""
        return [m.info for m in self.pool.members]

    # ------------------------------------------------------------------------------------------ weights
    def sync_weights(self, weights: Any = None, version: int | None = None) -> float:
        """Send new weights to every engine (admitting the engines that finished starting) and return the
        seconds it took (bytes sent go to `sync_bytes`).

        `weights` and `version` as for VLLMPolicy.sync_weights. A sync that fails because engines died is
        retried once over the engines left; a failure beyond that is an InfraError (the engines' weights are
        then unknown, so the run stops rather than sample with them).
        """
        t0 = time.perf_counter()
        version = self.version if version is None else version
        with self._lock:
            self._collect_started()
            self._admit_ready()
            sent, engine_s = self._sync_or_retry(weights, version)
        dt = time.perf_counter() - t0
        self.sync_seconds.append(dt)
        self.sync_bytes.append(sent)
        self.engine_sync_seconds.append(engine_s)
        return dt

    def _sync_or_retry(self, weights: Any, version: int) -> tuple[int, float]:
        try:
            return self._sync(weights, version)
        except InfraError:
            self._changes.forget()
            lost = self.pool.check()
            for m in lost:
                self._note_lost(m, "engine lost during a weight sync")
            if not lost or not self.pool.members:
                raise
            return self._sync(weights, version)

    def _sync(self, weights: Any, version: int) -> tuple[int, float]:
        """One sync to the serving engines: (bytes sent, the slowest engine's seconds)."""
        if not self.pool.members:
            raise InfraError("no engine serves: every engine was lost, and none has started in its place yet")
        adapters = weights is None and self.lora_rank and is_adapter_model(self.model)
        try:
            if adapters:
                pairs, config = adapter_weights(self.model)
                if int(config.get("r", 0)) > self.lora_rank:
                    raise UserError(f"LoRA rank {config.get('r')} is above the engines' {self.lora_rank}",
                                    field="policy.engine_lora_rank", fix="set it to train.lora_rank or more")
                sent, secs = 0, 0.0
                # the engines hold merged weights: put the base back under the adapter
                if not self._base_held:
                    sent, secs = self._broadcast(base_weights(self.model), version)
                    self._base_held = True
                more, secs2 = self._broadcast(pairs, version, config=config)
                self._engine_version_set(version)
                return sent + more, secs + secs2
            pairs = self._weight_pairs(weights)
            own = weights is None and not is_adapter_model(self.model)
            chosen, prints = self._changes.select(pairs,
                                                  frozen_mask(self.model, pairs) if own
                                                  else [False] * len(pairs))
            sent, secs = self._broadcast(chosen, version, partial=len(chosen) < len(pairs))
            self._changes.commit(prints)
            if is_adapter_model(self.model):
                self._base_held = False  # merged weights: a later adapter needs the base sent first
            self._engine_version_set(version)
            return sent, secs
        except BaseException:
            self._changes.forget()
            raise

    def _engine_version_set(self, version: int) -> None:
        self.engine_version = version
        self._sticky.clear()  # prefix caches were reset: a group may move to another engine

    def _broadcast(self, pairs: Sequence[tuple[str, Any]], version: int, *, partial: bool = False,
                   config: dict | None = None) -> tuple[int, float]:
        ray = self._ray
        group = self.pool.group(bool(pairs) and pairs[0][1].device.type == "cuda")
        meta, aliases = tensor_meta(pairs), tensor_aliases(pairs)
        if config is None:
            refs = [m.actor.receive_weights.remote(meta, version, aliases, partial)
                    for m in self.pool.members]
        else:
            refs = [m.actor.receive_adapter.remote(meta, version, config, aliases) for m in self.pool.members]
        try:
            sent = group.send(pairs, aliases)
            return sent, max(ray.get(refs, timeout=GROUP_TIMEOUT_S))
        except (ray.exceptions.RayError, RuntimeError) as exc:
            self.pool.drop_group()
            raise InfraError(f"weight sync to the engines failed: {cluster.cause(exc)}") from None

    # ---------------------------------------------------------------------------------------- membership
    def _collect_started(self) -> None:
        """Take the finished background starts; a failed one is an event, and the fleet is topped up again."""
        failed = self.pool.failed_starts
        self._ready += self.pool.started()
        n = len(self.pool.members)
        for _ in range(self.pool.failed_starts - failed):
            self._event(n, n, "an engine failed to start")
        if n + len(self.pool.starting) + len(self._ready) < self.target:
            self._launch("restoring the fleet after a failed start")

    def _admit_ready(self) -> None:
        """Started engines join the serving set; the caller syncs them in full before they serve."""
        for member, reason in self._ready:
            before = len(self.pool.members)
            self.pool.admit(member)
            self._event(before, len(self.pool.members), f"joined ({reason})")
        if self._ready:
            self._ready = []
            self._changes.forget()  # the new engine holds the model directory's weights, not what was sent
            self._sticky.clear()

    def await_engines(self, n: int, timeout_s: float = START_TIMEOUT_S) -> int:
        """Wait until `n` engines serve or `timeout_s` passes; how many serve. Started engines are admitted
        with a sync of the trainer's weights as version `engine_version`, so this is for synchronous mode (or
        any point where the trainer's weights are the engines' version); elsewhere they wait for the next
        sync."""
        deadline = time.monotonic() + timeout_s
        while len(self.pool.members) < n and time.monotonic() < deadline:
            with self._lock:
                self._ready += self.pool.started(timeout_s=min(5.0, max(0.0, deadline - time.monotonic())))
                if self._ready:
                    self.sync_weights(version=self.engine_version)
        return len(self.pool.members)

    def _note_lost(self, member: Member, reason: str) -> None:
        before = len(self.pool.members)
        self.pool.lose(member)
        self._sticky.clear()
        self._event(before, len(self.pool.members), reason)
        if len(self.pool.members) + len(self.pool.starting) + len(self._ready) < self.target:
            self._launch(f"replacing engine {member.serial}")

    def _launch(self, reason: str) -> None:
        want = len(self.pool.members) + len(self.pool.starting) + len(self._ready) + 1
        if want > self._requested:  # the autoscaler provisions what the fleet needs in all
            self._request(want)
        self.pool.launch(reason)

    def _request(self, n: int) -> None:
        cluster.want("engines", [self.pool.shape] * n)
        self._requested = n

    def _event(self, before: int, after: int, reason: str) -> None:
        self.scale_events.append(ScaleEvent(time.time(), before, after, reason))

    def _tend(self) -> None:
        """Before a generate call: admit started engines (synchronous mode: synced now), stop one idle engine
        above engines_min."""
        self._collect_started()
        if self._ready and self.auto_sync and self.engine_version == self.version:
            self.sync_weights(version=self.engine_version)  # admits them, and sends them everything
        idle_s = self.scale_down_idle_s
        members = self.pool.members
        if idle_s is not None and len(members) > self.engines_min:
            now = time.monotonic()
            idle = [m for m in members if not m.busy and now - m.last_used > idle_s]
            if idle:
                before = len(members)
                self.target = max(self.engines_min, before - 1)
                self._request(self.target)
                self.pool.retire(idle[0])
                self._sticky.clear()
                self._event(before, len(self.pool.members), f"idle for {now - idle[0].last_used:.0f} s")

    def _demand(self, waited: float) -> None:
        """After a generate call that waited `waited` seconds: scale up when it waited too long."""
        self.waits.append(waited)
        limit = self.scale_up_wait_s
        if limit is None or waited <= limit or self.pool.starting or self._ready:
            return
        if len(self.pool.members) >= self.engines_max:
            return
        self.target = min(self.engines_max, len(self.pool.members) + 1)
        self._launch(f"scale up: a generate call waited {waited:.1f} s")

    # ---------------------------------------------------------------------------------------- generation
    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        arrived = time.monotonic()
        with self._lock:
            self._tend()
            comps = super().generate(conversations, params, prompt_token_ids=prompt_token_ids)
            self._demand(time.monotonic() - arrived)
        return comps

    def _generate(self, conversations: Sequence[list[Message]], params: SamplingParams,
                  prompt_token_ids: Sequence[list[int] | None] | None) -> list[Completion]:
        """Each engine generates its share at once; a lost engine's share is run again on the engines left."""
        n = len(conversations)
        if not n:
            return []
        given = list(prompt_token_ids) if prompt_token_ids is not None else [None] * n
        prompts = [list(g) if g is not None else self.encode(self.render(c)) for c,
                   g in zip(conversations, given)]
        # not renumbered per engine
        seeds = tuple(params.seeds) if params.seeds is not None else tuple(range(n))
        if len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} conversations")
        params = replace(params, seeds=seeds)
        if len(self._sticky) > STICKY_LIMIT:
            self._sticky.clear()
        keys = [group_key(c, i) for i, c in enumerate(conversations)]
        results: list[Completion | None] = [None] * n
        todo = list(range(n))
        for _ in range(2):  # the call, then once more for the share of engines lost meanwhile
            if not todo or not self.pool.members:
                break
            todo = self._dispatch(todo, keys, prompts, params, results)
        why = "its engine was lost and no other engine could run it"
        return [r if r is not None else Completion(text="", finish_reason="error", error=why)
                for r in results]

    def _dispatch(self, todo: list[int], keys: list[str], prompts: list[list[int]], params: SamplingParams,
                  results: list[Completion | None]) -> list[int]:
        """Run conversations `todo` on the serving engines, filling `results`; the ones whose engine was
        lost."""
        ray = self._ray
        members = list(self.pool.members)
        assert params.seeds is not None
        sub = replace(params, seeds=tuple(params.seeds[i] for i in todo),
                      budgets=None if params.budgets is None else tuple(params.budgets[i] for i in todo))
        where = assign([keys[i] for i in todo], len(members), self._sticky)
        calls = []
        for e, idx, part in shares(where, sub):
            member = members[e]
            member.busy += 1
            calls.append((member, [todo[i] for i in idx],
                          member.actor.generate.remote([prompts[todo[i]] for i in idx],
                                                                                       part)))
        lost: list[int] = []
        for member, idx, ref in calls:
            try:
                version, comps = ray.get(ref)
            except cluster.actor_faults():
                self._note_lost(member, f"engine {member.serial} lost during a generate call")
                lost += idx
                continue
            finally:
                member.busy -= 1
                member.last_used = time.monotonic()
            if version != self.engine_version:
                raise InfraError(f"an engine holds version {version}, not {self.engine_version}")
            member.served += len(comps)
            for i, comp in zip(idx, comps):
                results[i] = comp
        return sorted(lost)

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop the engines, those starting too, and the weight-sync group (idempotent)."""
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is None:
            return
        ready, self._ready = getattr(self, "_ready", []), []
        cluster.stop([m.actor for m, _ in ready], "close", timeout_s=60)
        pool.close()
        if getattr(self, "_requested", 0):
            cluster.want("engines", [])  # withdraw what the autoscaler was asked for
