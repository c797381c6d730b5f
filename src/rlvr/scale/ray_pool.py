"""Sandbox pools as Ray actors: one pool actor per node, jobs routed to free capacity, dead actors replaced.

`RayPool` implements the SandboxPool protocol, so every layer that runs commands or verifies episodes works on a
cluster unchanged. Placement: one `PoolActor` per alive node (hard node affinity), each holding that node's local
isolated pool (`rlvr.sandbox.make_pool`). Routing: a job goes to the actor with the fewest jobs in flight; each
actor takes at most `slots` jobs at once, and when every slot on the cluster is taken the caller blocks (back
pressure) instead of queueing without bound. A lease is not a job: opening one takes no slot (it goes to the
actor with the fewest open leases), and each command of the lease takes a slot on that actor for the command's
own duration. So a caller only ever waits for jobs, which end by themselves within their limits, never for an
episode that would need the waiting thread to make progress (multi-turn episodes may outnumber the slots). Verification of an episode runs entirely on one node
(`verify_remote`): hidden material and the trusted harness never need to cross to the candidate's node.

Fault tolerance: a job whose actor died (node lost, process killed) is retried once on another actor and the dead
actor is replaced on its node if the node is still alive; a job is returned exactly once, so no result is lost or
counted twice. A lease (a workspace that persists between commands) lives on one actor: if that actor dies, the
workspace is gone, so the lease's later commands return `infra_error` and the episode is retried or masked by the
rollout engine, never scored as the program's failure.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import ray

from rlvr.config import SandboxConfig
from rlvr.errors import UserError
from rlvr.sandbox import limits_from
from rlvr.sandbox.base import FileMap, SandboxPool
from rlvr.sandbox.requirements import ProvidesRequirements, pool_for
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.scale import cluster
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import RemoteVerifier
from rlvr.verify.verdict import Verdict

ACTOR_FAULTS = cluster.actor_faults()


class PoolActor:
    """Holds one node's local sandbox pool and the leases opened on it."""

    def __init__(self, sandbox_config: dict[str, Any]) -> None:
        from contextlib import ExitStack

        from rlvr.sandbox import make_pool

        self.cfg = SandboxConfig.model_validate(sandbox_config)
        self.pool = make_pool(self.cfg)
        self.leases: dict[str, tuple[ExitStack, Any]] = {}
        self._stack_type = ExitStack

    def ping(self) -> dict[str, Any]:
        import os

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "leases": len(self.leases)}

    def run(self, argv: list[str], files: dict[str, Any] | None, stdin: Any, limits: dict[str, Any] | None,
            read: list[str], requirements: list[str] | None = None) -> dict[str, Any]:
        lim = None if limits is None else ExecLimits.model_validate(limits)  # only the fields the caller set
        pool = pool_for(self.pool, requirements or ())
        return pool.run(argv, files=files, stdin=stdin, limits=lim, read=read).model_dump(mode="json")

    def open_lease(self, lease_id: str, files: dict[str, Any] | None, requirements: list[str] | None = None) -> None:
        stack = self._stack_type()
        sandbox = stack.enter_context(pool_for(self.pool, requirements or ()).lease(files))
        self.leases[lease_id] = (stack, sandbox)

    def lease_run(self, lease_id: str, argv: list[str], files: dict[str, Any] | None, stdin: Any,
                  limits: dict[str, Any] | None, read: list[str]) -> dict[str, Any]:
        lim = None if limits is None else ExecLimits.model_validate(limits)  # only the fields the caller set
        sandbox = self.leases[lease_id][1]
        return sandbox.run(argv, files=files, stdin=stdin, limits=lim, read=read).model_dump(mode="json")

    def lease_write(self, lease_id: str, files: dict[str, Any]) -> None:
        self.leases[lease_id][1].write_files(files)

    def lease_read(self, lease_id: str, paths: list[str] | None) -> dict[str, str]:
        return self.leases[lease_id][1].read_files(paths)

    def close_lease(self, lease_id: str) -> None:
        entry = self.leases.pop(lease_id, None)
        if entry is not None:
            entry[0].close()

    def verify(self, task: dict[str, Any], final: dict[str, Any], seed: int, extras: dict[str, Any]) -> dict[str, Any]:
        from rlvr.verify.base import VerifyContext, verify

        verdict = verify(Task.model_validate(task), FinalState.model_validate(final),
                         VerifyContext(pool=self.pool, seed=seed, extras=extras))
        return verdict.model_dump(mode="json")

    def shutdown(self) -> None:
        for lease_id in list(self.leases):
            self.close_lease(lease_id)
        self.pool.close()


@dataclass
class _Slot:
    """One pool actor as the driver sees it."""

    node_id: str
    handle: Any
    in_flight: int = 0
    alive: bool = True
    served: int = 0
    generation: int = 0
    leases: set[str] = field(default_factory=set)


class RaySandbox:
    """A lease on one pool actor; the Sandbox protocol over Ray calls."""

    def __init__(self, pool: RayPool, slot: _Slot, lease_id: str) -> None:
        self._pool, self._slot, self.lease_id = pool, slot, lease_id
        self._generation = slot.generation

    def _lost(self) -> bool:
        return not self._slot.alive or self._slot.generation != self._generation

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = ()) -> ExecResult:
        """One command in the lease's workspace: it takes a job slot on the lease's actor for its own duration
        only (waiting, if the actor is busy, for a job to end: jobs end by themselves, within their limits)."""
        if self._lost():
            return _infra("the node holding this workspace was lost")
        try:
            self._pool._acquire(only=self._slot)
        except TimeoutError as exc:
            return _infra(str(exc))
        try:
            call = self._slot.handle.lease_run.remote(self.lease_id, list(argv), dict(files) if files else None,
                                                      stdin, _wire(limits), list(read))
            return ExecResult.model_validate(ray.get(call))
        except ACTOR_FAULTS as exc:
            self._pool._mark_dead(self._slot)
            return _infra(f"sandbox actor died during the command: {type(exc).__name__}")
        finally:
            self._pool._release(self._slot)

    def write_files(self, files: FileMap) -> None:
        if self._lost():
            raise RuntimeError("the node holding this workspace was lost")
        ray.get(self._slot.handle.lease_write.remote(self.lease_id, dict(files)))

    def read_files(self, paths: Sequence[str] | None = None) -> dict[str, str]:
        if self._lost():
            return {}
        try:
            return ray.get(self._slot.handle.lease_read.remote(self.lease_id, list(paths) if paths else None))
        except ACTOR_FAULTS:
            self._pool._mark_dead(self._slot)
            return {}


def _wire(limits: ExecLimits | None) -> dict[str, Any] | None:
    """Limits as they cross to an actor: only the fields the caller set, so the actor's pool keeps its defaults."""
    return None if limits is None else limits.model_dump(exclude_unset=True)


def _infra(message: str, attempts: int = 1) -> ExecResult:
    return ExecResult(status=ExecStatus.infra_error, error=message, attempts=attempts)


class RayPool(RemoteVerifier, ProvidesRequirements):
    """The SandboxPool protocol on a Ray cluster (see the module docstring)."""

    def __init__(self, address: str | None = None, sandbox: SandboxConfig | None = None, *,
                 slots_per_node: int | None = None, connect_timeout_s: float = 60.0) -> None:
        cluster.connect(address)
        self.sandbox = sandbox or SandboxConfig()
        self.limits = limits_from(self.sandbox)
        """The sandbox defaults, as each node's pool holds them."""
        self.slots_per_node = slots_per_node or self.sandbox.workers * 2
        self._lock = threading.Condition()
        self._slots: list[_Slot] = []
        self.replaced = 0
        self.retried = 0
        deadline = time.monotonic() + connect_timeout_s
        while not cluster.alive_nodes() and time.monotonic() < deadline:
            time.sleep(0.2)
        for node_id in cluster.alive_nodes():
            self._slots.append(self._start(node_id))
        if not self._slots:
            raise UserError("the Ray cluster has no alive nodes", field="cluster.address", fix="add nodes")
        ray.get([s.handle.ping.remote() for s in self._slots])

    # ------------------------------------------------------------------ placement and fault handling
    def _start(self, node_id: str) -> _Slot:
        handle = cluster.start(PoolActor, self.sandbox.model_dump(), strategy=cluster.on_node(node_id), num_cpus=0,
                               max_concurrency=self.slots_per_node + 4)
        return _Slot(node_id=node_id, handle=handle)

    def _mark_dead(self, slot: _Slot) -> None:
        """Replace a dead actor on its node if the node is alive; otherwise drop the node."""
        with self._lock:
            if not slot.alive:
                return
            slot.alive = False
            cluster.kill(slot.handle)
            if slot.node_id in cluster.alive_nodes():
                fresh = self._start(slot.node_id)
                slot.handle, slot.alive, slot.in_flight = fresh.handle, True, 0
                slot.leases = set()  # the old actor's workspaces are gone (their holders see `_lost`)
                slot.generation += 1
                self.replaced += 1
            self._lock.notify_all()

    def _acquire(self, exclude: _Slot | None = None, timeout_s: float = 600.0, only: _Slot | None = None) -> _Slot:
        """A job slot: on the live actor with the fewest jobs in flight (or on `only`, a lease's actor); blocks
        while every slot is busy (back pressure). Only jobs take slots, never leases: a job ends by itself
        within its limits, so a waiting caller never waits on something that needs the caller to progress."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                if only is not None:
                    live = [only] if only.alive else []
                else:
                    live = [s for s in self._slots if s.alive and s is not exclude] or \
                           [s for s in self._slots if s.alive]
                if not live:
                    raise RuntimeError("no live sandbox actors")
                best = min(live, key=lambda s: s.in_flight)
                if best.in_flight < self.slots_per_node:
                    best.in_flight += 1
                    return best
                if not self._lock.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"sandbox cluster saturated: no job slot free for {timeout_s:.0f} s")

    def _release(self, slot: _Slot) -> None:
        with self._lock:
            slot.in_flight = max(0, slot.in_flight - 1)
            slot.served += 1
            self._lock.notify_all()

    def _call(self, method: str, *args: Any) -> tuple[Any, int]:
        """Call a pool-actor method; on an actor fault retry once elsewhere. Returns (result or None, attempts)."""
        slot: _Slot | None = None
        for attempt in (1, 2):
            slot = self._acquire(exclude=slot)
            gen = slot.generation
            try:
                return ray.get(getattr(slot.handle, method).remote(*args)), attempt
            except ACTOR_FAULTS:
                if slot.generation == gen:
                    self._mark_dead(slot)
                self.retried += attempt == 1
            finally:
                self._release(slot)
        return None, 2

    # ---------------------------------------------------------------------------------- the protocol
    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), requirements: Sequence[str] = ()
            ) -> ExecResult:
        out, attempts = self._call("run", list(argv), dict(files) if files else None, stdin,
                                   _wire(limits), list(read), list(requirements))
        if out is None:
            return _infra("sandbox actor died twice running this job", attempts=attempts)
        return ExecResult.model_validate(out).model_copy(update={"attempts": attempts})

    def verify_remote(self, task: Task, final: FinalState, seed: int = 0, extras: Mapping[str, Any] | None = None
                      ) -> Verdict:
        """Verify on one node (hidden material stays with the verifier there), with the seed and extras a local
        verification would get."""
        out, attempts = self._call("verify", task.model_dump(mode="json"), final.model_dump(mode="json"), seed,
                                   dict(extras or {}))
        if out is None:
            return Verdict.infra(f"sandbox actor died twice verifying (attempts={attempts})")
        return Verdict.model_validate(out)

    def for_requirements(self, requirements: Sequence[str]) -> SandboxPool:
        """This pool with `requirements` sent along with every job: the node that runs it serves them."""
        return _WithRequirements(self, tuple(requirements))

    @contextmanager
    def lease(self, files: FileMap | None = None, requirements: Sequence[str] = ()) -> Iterator[RaySandbox]:
        """A workspace on the live actor with the fewest open leases. Opening one never waits for a job slot
        (a lease is not a job: an episode holds its lease across model turns, while its commands take slots
        one at a time), so any number of episodes may hold leases at once."""
        lease_id = uuid.uuid4().hex
        with self._lock:
            live = [s for s in self._slots if s.alive]
            if not live:
                raise RuntimeError("no live sandbox actors")
            slot = min(live, key=lambda s: (len(s.leases), s.in_flight))
            slot.leases.add(lease_id)
        generation = slot.generation
        try:
            ray.get(slot.handle.open_lease.remote(lease_id, dict(files) if files else None, list(requirements)))
            yield RaySandbox(self, slot, lease_id)
        except ACTOR_FAULTS:
            self._mark_dead(slot)
            raise
        finally:
            if slot.alive and slot.generation == generation:
                try:
                    ray.get(slot.handle.close_lease.remote(lease_id))
                except ACTOR_FAULTS:
                    self._mark_dead(slot)
            with self._lock:
                slot.leases.discard(lease_id)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"nodes": len({s.node_id for s in self._slots if s.alive}), "actors": len(self._slots),
                    "in_flight": sum(s.in_flight for s in self._slots), "replaced": self.replaced,
                    "retried": self.retried, "served": sum(s.served for s in self._slots)}

    def actor_handles(self) -> list[Any]:
        """The live pool actors (tests kill one to check recovery)."""
        return [s.handle for s in self._slots if s.alive]

    def close(self) -> None:
        live = [slot for slot in self._slots if slot.alive]
        for slot in live:
            slot.alive = False
        cluster.stop([slot.handle for slot in live], "shutdown", timeout_s=30)  # a dead actor is fine

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _WithRequirements:
    """A RayPool whose jobs and leases carry a task's requirements (the actor that runs them serves them)."""

    def __init__(self, pool: RayPool, requirements: tuple[str, ...]) -> None:
        self.pool, self.requirements, self.limits = pool, requirements, pool.limits

    def lease(self, files: FileMap | None = None) -> Any:
        return self.pool.lease(files, requirements=self.requirements)

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = ()) -> ExecResult:
        return self.pool.run(argv, files, stdin, limits, read, requirements=self.requirements)

    def close(self) -> None:
        """The RayPool it wraps is closed by its owner."""
