"""Sandbox pools as Ray actors: one pool actor per node, jobs routed to free capacity, dead actors replaced.

`RayPool` implements the SandboxPool protocol, so every layer that runs commands or verifies episodes works on
a cluster unchanged. Placement: one `PoolActor` per alive node (hard node affinity), each holding that node's
local isolated pool (`rlvr.sandbox.make_pool`). Routing: a job goes to the actor with the fewest jobs in
flight; each actor takes at most `slots` jobs at once, and when every slot on the cluster is taken the caller
blocks (back pressure) instead of queueing without bound. A lease is not a job: opening one takes no slot (it
goes to the actor with the fewest open leases), and each command of the lease takes a slot on that actor for
the command's own duration. So a caller only ever waits for jobs, which end by themselves within their limits,
never for an episode that would need the waiting thread to make progress (multi-turn episodes may outnumber
the slots). Verification of an episode runs entirely on one node (`verify_remote`): hidden material and the
trusted harness never need to cross to the candidate's node.

Fault tolerance: a job whose actor died (node lost, process killed) is retried once on another actor and the
dead actor is replaced on its node if the node is still alive; a job is returned exactly once, so no result is
lost or counted twice. A lease (a workspace that persists between commands) lives on one actor: if that actor
dies, the workspace is gone, so the lease's later commands return `infra_error` and the episode is retried or
masked by the rollouts, never scored as the program's failure.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import ray

from rlvr.config import ClusterConfig, SandboxConfig
from rlvr.errors import UserError
from rlvr.sandbox import limits_from
from rlvr.sandbox.base import FileMap, SandboxPool, network_refused
from rlvr.sandbox.requirements import ProvidesRequirements
from rlvr.sandbox.result import ExecLimits, ExecResult
from rlvr.scale import cluster, elastic
from rlvr.scale.pool_actor import PoolActor
from rlvr.scale.ray_lease import ACTOR_FAULTS, RaySandbox, Slot, infra_result, user_error, wire_limits
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import RemoteVerifier
from rlvr.verify.verdict import Verdict

START_TIMEOUT_S = 60.0
"""Limit of placing and starting one worker; past it the node is given up until a later scale-up."""


class RayPool(RemoteVerifier, ProvidesRequirements):
    """The SandboxPool protocol on a Ray cluster whose nodes come and go (see the module docstring)."""

    def __init__(self, address: str | None = None, sandbox: SandboxConfig | None = None, *,
                 fleet: ClusterConfig | None = None, slots_per_node: int | None = None,
                 connect_timeout_s: float = 60.0, watch: bool = True) -> None:
        cluster.connect(address)
        self.sandbox = sandbox or SandboxConfig()
        self.fleet = fleet or ClusterConfig(address=address)
        self.limits = limits_from(self.sandbox)
        """The sandbox defaults, as each node's pool holds them."""
        self.slots_per_node = slots_per_node or self.sandbox.workers * 2
        self._lock = threading.Condition()
        self._slots: list[Slot] = []
        self._starting: dict[str, tuple[Any, Any, float]] = {}  # node -> (handle, ping, since)
        self._seen: set[str] = set()
        self._released: set[str] = set()
        self._waiting: dict[int, float] = {}  # a waiting caller -> when it began to wait
        self._asked = 0
        self._why: dict[str, str] = {}  # a starting worker -> why it was started (joined, up)
        self.replaced = 0
        self.retried = 0
        self.events: list[dict[str, Any]] = []
        """What happened to the fleet: {"t": Unix time, "event": joined|lost|draining|handed
        back|drained|up|down| asked, "node": short node name}, in order."""
        self._closed = threading.Event()
        self._start_fleet(connect_timeout_s)
        self._watcher: threading.Thread | None = None
        if watch:
            self._watcher = threading.Thread(target=self._watch, name="rlvr-fleet", daemon=True)
            self._watcher.start()

    # ------------------------------------------------------------------ the fleet at start, and as it changes
    def _start_fleet(self, timeout_s: float) -> None:
        """One worker on each node that can hold one (up to the max), waiting up to `timeout_s` for all of
        them to answer (workers still starting then join from the watcher) and for at least
        `sandbox_workers_min` (asking the autoscaler for the rest)."""
        need = self.fleet.sandbox_workers_min
        deadline = time.monotonic() + timeout_s
        while True:
            self._look()
            ready = [s for s in self._slots if s.alive]
            if (len(ready) >= need and not self._starting) or time.monotonic() >= deadline:
                # every node there at start has its worker (or could not place one): the episodes spread
                break
            time.sleep(0.2)
        if len(ready) < need:
            self.close()
            shape = f"{cluster._count(self.fleet.sandbox_cpus)} CPU each"
            raise UserError(f"sandbox_workers_min = {need} but only {len(ready)} sandbox workers "
                            f"({shape}) could be placed on the Ray cluster within {timeout_s:.0f} s",
                            field="cluster.sandbox_workers_min",
                            fix="lower it, lower cluster.sandbox_cpus, or add nodes")

    def _watch(self) -> None:
        while not self._closed.wait(self.fleet.watch_interval_s):
            try:
                self._look()
            except Exception as exc:  # noqa: BLE001 (Ray busy or shutting down: the next look tries again)
                self._event("look failed", f"{type(exc).__name__}: {exc}"[:200])

    def _event(self, what: str, node: str) -> None:
        self.events.append({"t": time.time(), "event": what, "node": node})

    def _look(self) -> None:
        """One look at the cluster: finish starting workers, then plan (rlvr.scale.elastic) and carry it
        out."""
        if self._closed.is_set():
            return
        self._poll_starting()
        alive = cluster.alive_nodes(min_cpus=self.fleet.sandbox_cpus)
        draining = cluster.draining_nodes()
        now = time.monotonic()
        with self._lock:
            for s in self._slots:
                if s.alive and s.node_id in draining and not s.draining:
                    s.draining = True
                    self._event("draining", s.node)
            seen = [elastic.Seen(s.node_id, s.in_flight, len(s.leases), s.idle_s(now)) for s in self._slots
                    if s.alive]
            waiting = now - min(self._waiting.values()) if self._waiting else 0.0
            todo = elastic.plan(seen, alive, draining, seen=self._seen, released=self._released,
                                starting=list(self._starting), waiting_s=waiting, asked=self._asked,
                                now=time.time(),
                                cfg=self.fleet)
            by_node = {s.node_id: s for s in self._slots if s.alive}
            for what, node in todo.events:
                if what not in ("joined", "up", "drained"):  # those are logged when they happen
                    self._event(what, node if what == "asked" else cluster.short(node))
            for node in todo.lost:
                self._drop(by_node[node])
            for node in todo.hand_back:
                self._hand_back(by_node[node])
            stopping = [by_node[node] for node in todo.stop]
            for slot in stopping:
                slot.alive = False
                if slot.node_id not in draining:
                    self._released.add(slot.node_id)
            self._slots = [s for s in self._slots if s.alive]
            self._lock.notify_all()
        if stopping:
            cluster.stop([s.handle for s in stopping], "shutdown", timeout_s=30)
        for node in todo.drained:
            cluster.mark_drained(node)
            self._event("drained", cluster.short(node))
        for node in todo.start:
            self._begin_start(node, "up" if node in self._released else "joined")
        if todo.want != self._asked:
            self._asked = todo.want
            cluster.want("sandbox", [{"CPU": self.fleet.sandbox_cpus or 1.0}] * todo.want)

    def _begin_start(self, node_id: str, why: str) -> None:
        handle = cluster.start(PoolActor, self.sandbox.model_dump(), strategy=cluster.on_node(node_id),
                               num_cpus=self.fleet.sandbox_cpus, max_concurrency=self.slots_per_node + 4)
        self._seen.add(node_id)
        self._released.discard(node_id)
        self._starting[node_id] = (handle, handle.ping.remote(), time.monotonic())
        self._why[node_id] = why

    def _poll_starting(self) -> None:
        """Workers that answered their first ping join the fleet; one that cannot be placed in time is given
        up (its node is released: a later scale-up may try it again)."""
        for node_id, (handle, ping, since) in list(self._starting.items()):
            ready, _ = ray.wait([ping], timeout=0)
            if ready:
                del self._starting[node_id]
                try:
                    ray.get(ping)
                except ACTOR_FAULTS:
                    self._released.add(node_id)
                    continue
                with self._lock:
                    self._slots.append(Slot(node_id=node_id, handle=handle))
                    self._lock.notify_all()
                self._event(self._why.pop(node_id, "joined"), cluster.short(node_id))
            elif time.monotonic() - since > START_TIMEOUT_S:
                del self._starting[node_id]
                cluster.kill(handle)
                self._released.add(node_id)
                self._event("could not place a worker", cluster.short(node_id))

    def _hand_back(self, slot: Slot) -> None:
        """Give up a draining worker's open workspaces: their holders see them lost (their episodes rebuild
        them elsewhere, the changes replayed), and the actor closes them."""
        leases, slot.leases = list(slot.leases), set()
        slot.generation += 1
        for lease_id in leases:
            try:
                slot.handle.close_lease.remote(lease_id)
            except Exception:  # noqa: BLE001 (the actor is going anyway)
                pass

    def _drop(self, slot: Slot) -> None:
        """A worker whose node is gone: its workspaces are lost with it."""
        slot.alive = False
        slot.generation += 1
        slot.leases = set()
        cluster.kill(slot.handle)

    # ------------------------------------------------------------------ placement and fault handling
    def _mark_dead(self, slot: Slot) -> None:
        """Replace a dead actor on its node if the node is alive and staying; otherwise drop the worker."""
        with self._lock:
            if not slot.alive:
                return
            cluster.kill(slot.handle)
            if slot.node_id in cluster.alive_nodes() and not slot.draining:
                handle = cluster.start(PoolActor, self.sandbox.model_dump(),
                                       strategy=cluster.on_node(slot.node_id),
                                       num_cpus=self.fleet.sandbox_cpus,
                                       max_concurrency=self.slots_per_node + 4)
                slot.handle, slot.in_flight = handle, 0
                slot.leases = set()  # the old actor's workspaces are gone (their holders see `_lost`)
                slot.generation += 1
                self.replaced += 1
            else:
                self._drop(slot)
                self._slots = [s for s in self._slots if s.alive]
            self._lock.notify_all()

    def _acquire(self, exclude: Slot | None = None, timeout_s: float = 600.0,
                 only: Slot | None = None) -> Slot:
        """A job slot: on the live, staying actor with the fewest jobs in flight (or on `only`, a lease's
        actor, draining or not); blocks while every slot is busy (back pressure), and a wait longer than
        `scale_up_wait_s` asks for one more worker. Only jobs take slots, never leases: a job ends by itself
        within its limits, so a waiting caller never waits on something that needs the caller to progress."""
        deadline = time.monotonic() + timeout_s
        me = threading.get_ident()
        with self._lock:
            try:
                while True:
                    if only is not None:
                        if not only.alive:
                            raise RuntimeError("the worker holding this workspace is gone")
                        live = [only]
                    else:
                        staying = [s for s in self._slots if s.alive and not s.draining]
                        live = [s for s in staying if s is not exclude] or staying
                        if not live and not self._starting and not self._waiting_for_nodes():
                            raise RuntimeError("no live sandbox actors")  # and none on the way
                    best = min(live, key=lambda s: s.in_flight, default=None)
                    if best is not None and best.in_flight < self.slots_per_node:
                        best.in_flight += 1
                        return best
                    self._waiting.setdefault(me, time.monotonic())
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"sandbox cluster saturated: no job slot free for "
                                           f"{timeout_s:.0f} s")
                    self._lock.wait(timeout=min(left, 1.0))
            finally:
                self._waiting.pop(me, None)

    def _waiting_for_nodes(self) -> bool:
        """Whether the fleet still expects workers (it asked the autoscaler for more than it has)."""
        return self._asked > len([s for s in self._slots if s.alive])

    def _release(self, slot: Slot) -> None:
        with self._lock:
            slot.in_flight = max(0, slot.in_flight - 1)
            slot.served += 1
            slot.last_busy = time.monotonic()
            self._lock.notify_all()

    def _call(self, method: str, *args: Any) -> tuple[Any, int, str]:
        """Call a pool-actor method; on an actor fault retry once elsewhere. Returns (result or None,
        attempts, the node of the last attempt)."""
        slot: Slot | None = None
        for attempt in (1, 2):
            slot = self._acquire(exclude=slot)
            gen = slot.generation
            try:
                return ray.get(getattr(slot.handle, method).remote(*args)), attempt, slot.node
            except ACTOR_FAULTS:
                if slot.generation == gen:
                    self._mark_dead(slot)
                self.retried += attempt == 1
            finally:
                self._release(slot)
        return None, 2, slot.node if slot else ""

    # ---------------------------------------------------------------------------------- the protocol
    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), requirements: Sequence[str] = (), *,
            image: str | None = None, network: bool = False) -> ExecResult:
        """One job on the node with the fewest in flight; `image` and `network` as `lease`."""
        self._check_network(network)
        try:
            out, attempts, _ = self._call("run", list(argv), dict(files) if files else None, stdin,
                                          wire_limits(limits), list(read), list(requirements), image, network)
        except UserError as exc:
            raise user_error(exc) from None
        if out is None:
            return infra_result("sandbox actor died twice running this job", attempts=attempts)
        return ExecResult.model_validate(out).model_copy(update={"attempts": attempts})

    def verify_remote(self, task: Task, final: FinalState, seed: int = 0,
                      extras: Mapping[str, Any] | None = None
                      ) -> Verdict:
        """Verify on one node (hidden material stays with the verifier there), with the seed and extras a
        local verification would get; the verdict's `details["node"]` names the node."""
        out, attempts, node = self._call("verify", task.model_dump(mode="json"),
                                         final.model_dump(mode="json"),
                                         seed, dict(extras or {}))
        if out is None:
            return Verdict.infra(f"sandbox actor died twice verifying (attempts={attempts})")
        verdict = Verdict.model_validate(out)
        return verdict.model_copy(update={"details": {**verdict.details, "node": node}})

    def for_requirements(self, requirements: Sequence[str]) -> SandboxPool:
        """This pool with `requirements` sent along with every job: the node that runs it serves them."""
        return _WithRequirements(self, tuple(requirements))

    def _check_network(self, network: bool) -> None:
        if network and not self.sandbox.allow_network:
            raise network_refused()

    @contextmanager
    def lease(self, files: FileMap | None = None, requirements: Sequence[str] = (), *,
              image: str | None = None, network: bool = False) -> Iterator[RaySandbox]:
        """A workspace on the live, staying actor with the fewest open leases. Opening one never waits for a
        job slot (a lease is not a job: an episode holds its lease across model turns, while its commands take
        slots one at a time), so any number of episodes may hold leases at once.

        `image` (a reference) is built or pulled on the node that holds the lease, once per node (its image
        cache is shared by every process there; `rlvr node start --warm-image` prepares images before the node
        joins); a path in it must exist on that node. An image that cannot be had is the UserError the node
        raised."""
        self._check_network(network)
        lease_id = uuid.uuid4().hex
        slot: Slot | None = None
        for attempt in (1, 2):  # an actor found dead on opening (its node just died): once more elsewhere
            slot = self._lease_slot(lease_id, exclude=slot)
            generation = slot.generation
            try:
                ray.get(slot.handle.open_lease.remote(lease_id, dict(files) if files else None,
                                                      list(requirements), image, network))
                break
            except UserError as exc:  # the node's own one-line refusal (an image that cannot be had)
                with self._lock:
                    slot.leases.discard(lease_id)
                raise user_error(exc) from None
            except ACTOR_FAULTS:
                with self._lock:
                    slot.leases.discard(lease_id)
                if slot.generation == generation:
                    self._mark_dead(slot)
                self.retried += 1
                if attempt == 2:
                    raise
        assert slot is not None
        try:
            yield RaySandbox(self, slot, lease_id)
        finally:
            if slot.alive and slot.generation == generation:
                try:
                    ray.get(slot.handle.close_lease.remote(lease_id))
                except ACTOR_FAULTS:
                    self._mark_dead(slot)
            with self._lock:
                slot.leases.discard(lease_id)
                slot.last_busy = time.monotonic()
                self._lock.notify_all()

    def _lease_slot(self, lease_id: str, exclude: Slot | None = None) -> Slot:
        """The live, staying actor with the fewest open leases (not `exclude` if another will do), the lease
        recorded on it; waits while every worker drains and new ones start."""
        deadline = time.monotonic() + START_TIMEOUT_S
        with self._lock:
            while True:
                staying = [s for s in self._slots if s.alive and not s.draining]
                live = [s for s in staying if s is not exclude] or staying
                if live or not self._starting or time.monotonic() >= deadline:
                    break
                self._lock.wait(timeout=1.0)
            if not live:
                raise RuntimeError("no live sandbox actors")
            slot = min(live, key=lambda s: (len(s.leases), s.in_flight))
            slot.leases.add(lease_id)
            return slot

    def stats(self) -> dict[str, Any]:
        with self._lock:
            live = [s for s in self._slots if s.alive]
            return {"nodes": len({s.node_id for s in live}), "actors": len(live),
                    "draining": sum(s.draining for s in live), "starting": len(self._starting),
                    "in_flight": sum(s.in_flight for s in live), "replaced": self.replaced,
                    "retried": self.retried, "served": sum(s.served for s in self._slots),
                    "asked": self._asked, "per_node": {s.node: s.served for s in live}}

    def workers(self) -> list[str]:
        """The full Ray ids of the nodes that hold a live worker."""
        with self._lock:
            return [s.node_id for s in self._slots if s.alive]

    def actor_handles(self) -> list[Any]:
        """The live pool actors (tests kill one to check recovery)."""
        return [s.handle for s in self._slots if s.alive]

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            live = [slot for slot in self._slots if slot.alive]
            for slot in live:
                slot.alive = False
            starting, self._starting = [h for h, _, _ in self._starting.values()], {}
            self._lock.notify_all()
        cluster.stop([slot.handle for slot in live], "shutdown", timeout_s=30)  # a dead actor is fine
        cluster.stop(starting, None)
        if self._asked:
            self._asked = 0
            try:
                cluster.want("sandbox", [])
            except Exception:  # noqa: BLE001 (Ray already gone: no request stands)
                pass

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _WithRequirements:
    """A RayPool whose jobs and leases carry a task's requirements (the actor that runs them serves them)."""

    def __init__(self, pool: RayPool, requirements: tuple[str, ...]) -> None:
        self.pool, self.requirements, self.limits = pool, requirements, pool.limits

    def lease(self, files: FileMap | None = None, *, image: str | None = None, network: bool = False) -> Any:
        return self.pool.lease(files, requirements=self.requirements, image=image, network=network)

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), *, image: str | None = None,
            network: bool = False) -> ExecResult:
        return self.pool.run(argv, files, stdin, limits, read, requirements=self.requirements, image=image,
                             network=network)

    def close(self) -> None:
        """The RayPool it wraps is closed by its owner."""
