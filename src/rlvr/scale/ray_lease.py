"""A lease on one pool actor of a `RayPool` (`rlvr.scale.ray_pool`): the driver's record of an actor (`Slot`)
and the Sandbox protocol over Ray calls (`RaySandbox`). Each command of a lease takes a job slot on its actor
for the command's own duration; a lease whose actor died (or whose workspaces were handed back) reports
`infra_error`."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import ray

from rlvr.errors import InfraError, UserError
from rlvr.sandbox.base import FileMap
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.scale import cluster

ACTOR_FAULTS = cluster.actor_faults()


class SlotHost(Protocol):
    """What a lease needs of its pool: a job slot on its actor, given back after the command, and word of a
    dead actor."""

    def _acquire(self, exclude: Slot | None = None, timeout_s: float = 600.0,
                 only: Slot | None = None) -> Slot: ...
    def _release(self, slot: Slot) -> None: ...
    def _mark_dead(self, slot: Slot) -> None: ...


@dataclass
class Slot:
    """One pool actor as the driver sees it."""

    node_id: str
    handle: Any
    in_flight: int = 0
    alive: bool = True
    served: int = 0
    generation: int = 0
    """Bumped when the actor's workspaces are gone (actor replaced, or handed back from a draining node)."""
    leases: set[str] = field(default_factory=set)
    draining: bool = False
    """Its node is draining: nothing new goes there (a lease's own commands still do)."""
    last_busy: float = field(default_factory=time.monotonic)

    @property
    def node(self) -> str:
        return cluster.short(self.node_id)

    def idle_s(self, now: float) -> float:
        return 0.0 if self.in_flight or self.leases else now - self.last_busy


class RaySandbox:
    """A lease on one pool actor; the Sandbox protocol over Ray calls."""

    def __init__(self, pool: SlotHost, slot: Slot, lease_id: str) -> None:
        self._pool, self._slot, self.lease_id = pool, slot, lease_id
        self._generation = slot.generation
        self.node = slot.node
        """The node that holds the workspace (an episode records it)."""

    def _lost(self) -> bool:
        return not self._slot.alive or self._slot.generation != self._generation

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = ()) -> ExecResult:
        """One command in the lease's workspace: it takes a job slot on the lease's actor for its own duration
        only (waiting, if the actor is busy, for a job to end: jobs end by themselves, within their
        limits)."""
        if self._lost():
            return infra_result("the node holding this workspace was lost")
        try:
            self._pool._acquire(only=self._slot)
        except (TimeoutError, RuntimeError) as exc:
            return infra_result(str(exc))
        try:
            call = self._slot.handle.lease_run.remote(self.lease_id, list(argv),
                                                      dict(files) if files else None,
                                                      stdin, wire_limits(limits), list(read))
            return ExecResult.model_validate(ray.get(call))
        except UserError as exc:  # refused on the node (a shell command in an image without one)
            raise user_error(exc) from None
        except ACTOR_FAULTS as exc:
            self._pool._mark_dead(self._slot)
            return infra_result(f"sandbox actor died during the command: {type(exc).__name__}")
        finally:
            self._pool._release(self._slot)

    def write_files(self, files: FileMap) -> None:
        if self._lost():
            raise InfraError("the node holding this workspace was lost")
        try:
            ray.get(self._slot.handle.lease_write.remote(self.lease_id, dict(files)))
        except ACTOR_FAULTS:
            self._pool._mark_dead(self._slot)
            raise InfraError("the sandbox actor holding this workspace died") from None

    def read_files(self, paths: Sequence[str] | None = None) -> dict[str, str]:
        """The workspace's files; a workspace that is gone raises InfraError (an empty read would be judged as
        the program's final state)."""
        if self._lost():
            raise InfraError("the node holding this workspace was lost")
        try:
            return ray.get(self._slot.handle.lease_read.remote(self.lease_id, list(paths) if paths else None))
        except ACTOR_FAULTS:
            self._pool._mark_dead(self._slot)
            raise InfraError("the sandbox actor holding this workspace died") from None


def wire_limits(limits: ExecLimits | None) -> dict[str, Any] | None:
    """Limits as they cross to an actor: only the fields the caller set, so the actor's pool keeps its
    defaults."""
    return None if limits is None else limits.model_dump(exclude_unset=True)


def user_error(exc: UserError) -> UserError:
    """The UserError a pool actor raised, without Ray's wrapping (so the CLI prints its one line)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, UserError) else exc


def infra_result(message: str, attempts: int = 1) -> ExecResult:
    return ExecResult(status=ExecStatus.infra_error, error=message, attempts=attempts)
