"""The engines of disaggregated generation as a changing set: who serves, who is starting, who was lost, and
the weight-sync group over whoever serves now.

An `EnginePool` (held by rlvr.rollout.fleet.engines's `EnginesPolicy`) starts `EngineActor`s through
rlvr.scale.cluster, one GPU each (`engine_tp` with tensor parallelism) or one CPU. The engines the policy
starts with are waited for; every later one (a replacement for a lost engine, a scale-up) starts in the
background: `launch` returns at once and `started` hands over, without waiting, the engines whose start has
finished. The policy admits those only at a point where it can sync them (rlvr.rollout.fleet.engines), so that
no engine serves before it holds the current weights.

The weight-sync group has a fixed world size (torch.distributed's), so it belongs to one membership:
`open_group` builds it over the serving engines under a fresh store prefix, and any change of membership
(`lose`, `admit`, `retire`) drops it; the next sync builds the next one. An engine that dies is noticed by the
fault its calls raise (`cluster.actor_faults`); it is killed for good and never comes back.
"""
from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import InfraError
from rlvr.rollout.fleet.actor import EngineActor
from rlvr.rollout.fleet.weight_sync import GROUP_TIMEOUT_S, WeightGroup
from rlvr.scale import cluster

START_TIMEOUT_S = 900.0
"""Limit of an engine's start-up (a CPU engine takes about a minute on a loaded 2-core machine). A background
start that has not finished by then (no node can place it) is given up and counted as a failed start."""


@dataclass
class Member:
    """One engine that serves."""

    actor: Any
    info: dict[str, Any]
    """What it reported at start: node, node id, GPU ids."""
    serial: int
    """Its number in this pool, never reused (the first engines are 0..K-1)."""
    busy: int = 0
    """Generate calls in flight on it."""
    last_used: float = field(default_factory=time.monotonic)
    """When it last finished a generate call (or joined)."""
    served: int = 0
    """Completions it returned."""


@dataclass
class Starting:
    """An engine whose start runs in the background."""

    actor: Any
    ref: Any
    serial: int
    since: float
    reason: str


class EnginePool:
    """The engine actors of one policy (see the module docstring)."""

    def __init__(self, path: Path, options: dict[str, Any], *, gpus: int, engine_tp: int) -> None:
        self.path, self.options, self.gpus, self.engine_tp = path, options, gpus, engine_tp
        self.members: list[Member] = []
        self.starting: list[Starting] = []
        self.failed_starts = 0
        self._serials = itertools.count()
        self._groups = itertools.count()
        self._group: WeightGroup | None = None
        self._group_of: tuple[int, ...] = ()

    @property
    def shape(self) -> dict[str, float]:
        """The resources of one engine (what the autoscaler is asked for per engine)."""
        return {"GPU": float(self.gpus)} if self.gpus else {"CPU": 1.0}

    # ------------------------------------------------------------------------------------------ starting
    def _spawn(self) -> tuple[Any, Any, int]:
        actor = cluster.start(EngineActor, num_cpus=0 if self.gpus else 1, num_gpus=self.gpus)
        return actor, actor.start.remote(str(self.path), self.options), next(self._serials)

    def start(self, n: int, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start `n` engines and wait for them (a one-line UserError past `timeout_s`)."""
        spawned = [self._spawn() for _ in range(n)]
        try:
            infos = cluster.wait_started([ref for _, ref, _ in spawned], timeout_s=timeout_s,
                                         what="the engines did not start", field="policy.engines",
                                         fix="check that the Ray cluster can place them (`ray status`)")
        except BaseException:
            cluster.stop([a for a, _, _ in spawned], method=None)
            raise
        self.members += [Member(a, info, serial) for (a, _, serial), info in zip(spawned, infos)]

    def launch(self, reason: str) -> None:
        """Start one more engine in the background (see `started`)."""
        actor, ref, serial = self._spawn()
        self.starting.append(Starting(actor, ref, serial, time.monotonic(), reason))

    def started(self, timeout_s: float = 0.0) -> list[tuple[Member, str]]:
        """The background starts that finished (waiting up to `timeout_s` for the first), as members not yet
        serving, with the reason each was launched. A failed or overdue start is dropped and counted."""
        if not self.starting:
            return []
        ray = cluster.import_ray()
        refs = [s.ref for s in self.starting]
        if timeout_s > 0:
            ray.wait(refs, num_returns=1, timeout=timeout_s)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = {id(r) for r in ready}
        out: list[tuple[Member, str]] = []
        keep: list[Starting] = []
        now = time.monotonic()
        for s in self.starting:
            if id(s.ref) in done:
                try:
                    out.append((Member(s.actor, ray.get(s.ref), s.serial), s.reason))
                except ray.exceptions.RayError:
                    self.failed_starts += 1
                    cluster.kill(s.actor)
            elif now - s.since > START_TIMEOUT_S:
                self.failed_starts += 1
                cluster.kill(s.actor)
            else:
                keep.append(s)
        self.starting = keep
        return out

    def cancel_starts(self) -> int:
        """Give up every background start (fleet shrinking, or closing); how many there were."""
        n = len(self.starting)
        cluster.stop([s.actor for s in self.starting], method=None)
        self.starting = []
        return n

    # -------------------------------------------------------------------------------------- membership
    def admit(self, member: Member) -> None:
        """A started engine joins the serving set (the caller syncs it before any generate call reaches
        it)."""
        member.last_used = time.monotonic()
        self.members.append(member)
        self.drop_group()

    def lose(self, member: Member) -> None:
        """An engine found dead: killed for good, out of the serving set and of the group."""
        if member in self.members:
            self.members.remove(member)
            self.drop_group()
        cluster.kill(member.actor)

    def retire(self, member: Member) -> None:
        """An engine no longer needed: stopped (its KV cache freed), out of the serving set and of the
        group."""
        if member in self.members:
            self.members.remove(member)
            self.drop_group()
        cluster.stop([member.actor], "close", timeout_s=60)

    def check(self, timeout_s: float = 30.0) -> list[Member]:
        """Ask every serving engine for a sign of life; the ones that are gone are `lose`n and returned."""
        ray = cluster.import_ray()
        refs = [(m, m.actor.alive.remote()) for m in self.members]
        lost = []
        for m, ref in refs:
            try:
                ray.get(ref, timeout=timeout_s)
            except (*cluster.actor_faults(), ray.exceptions.GetTimeoutError):
                lost.append(m)
        for m in lost:
            self.lose(m)
        return lost

    # ------------------------------------------------------------------------------------------ the group
    def group(self, on_cuda: bool) -> WeightGroup:
        """The weight-sync group over the serving engines, built when membership changed since the last one:
        NCCL when the weights are on CUDA and the engines on GPUs, else gloo."""
        members = tuple(m.serial for m in self.members)
        if self._group is not None and self._group_of == members:
            return self._group
        self.drop_group()
        ray = cluster.import_ray()
        backend = "nccl" if on_cuda and self.gpus else "gloo"
        world = 1 + len(self.members) * self.engine_tp
        host = ray.util.get_node_ip_address()
        prefix = f"rlvr-weights-{next(self._groups)}"
        store = WeightGroup.host_store(host, world)
        refs = [m.actor.init_weight_group.remote(host, store.port, 1 + i * self.engine_tp, world, backend,
                                                 prefix)
                for i, m in enumerate(self.members)]
        joined: Future[WeightGroup] = Future()

        def join() -> None:  # rank 0 joins beside the engines, so that an engine's failure is seen at once
            try:
                joined.set_result(WeightGroup.open(host, store.port, 0, world, backend,
                                                   "cuda" if backend == "nccl" else "cpu", store=store,
                                                   prefix=prefix))
            except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
                joined.set_exception(exc)

        threading.Thread(target=join, name="rlvr-weight-group", daemon=True).start()
        try:
            ray.get(refs, timeout=GROUP_TIMEOUT_S)
        except ray.exceptions.RayError as exc:
            raise InfraError(f"an engine could not join the weight-sync group: "
                             f"{cluster.cause(exc)}") from None
        self._group, self._group_of = joined.result(timeout=GROUP_TIMEOUT_S), members
        return self._group

    def drop_group(self) -> None:
        group, self._group, self._group_of = self._group, None, ()
        if group is not None:
            group.close()

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop every engine, serving or starting, and the group (idempotent)."""
        self.drop_group()
        self.cancel_starts()
        members, self.members = self.members, []
        # one already gone is killed all the same
        cluster.stop([m.actor for m in members], "close", timeout_s=60)
