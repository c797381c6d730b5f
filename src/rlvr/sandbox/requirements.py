"""Sandboxes for tasks that need Python packages: a pool serves a task's `requirements` by running, for that
task, an interpreter whose environment has them.

    pool = pool_for(pool, task.requirements)    # the same pool when its interpreter already has them
    with pool.lease(files) as sb: ...

A pool that can (a `ProvidesRequirements`: the isolated and the unisolated pools through `RequirementsPools`;
the Ray pool forwards the requirements to the node that runs the job) keeps one derived pool per environment,
started on first need with its own limits and warm modules, and closes them with itself. The environment is a
venv made once per set of requirements (`rlvr.sandbox.venvs.ensure_env`, cached under `env_cache()`), mounted
read-only in the sandbox like the interpreter itself, so a candidate can use the packages and never change
them.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import rlvr.sandbox.venvs as env
from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool


def pool_for(pool: SandboxPool, requirements: Sequence[str]) -> SandboxPool:
    """The pool that runs programs needing `requirements`: `pool` itself when there are none; otherwise what
    its `for_requirements` gives. A pool that cannot provide packages is a UserError (never a silent run on an
    interpreter that lacks them, which would fail the task for the environment's fault)."""
    if not requirements:
        return pool
    if not isinstance(pool, ProvidesRequirements):
        raise UserError(f"this {type(pool).__name__} cannot give a task the packages it requires "
                        f"({', '.join(requirements)})", field="requirements",
                        fix="run it on the isolated pool ([sandbox] isolation = \"bwrap\") or on Ray")
    return pool.for_requirements(tuple(requirements))


class ProvidesRequirements(ABC):
    """A pool that can serve a task's requirements declares it by subclassing this (explicitly: nothing probes
    a pool for methods)."""

    @abstractmethod
    def for_requirements(self, requirements: Sequence[str]) -> SandboxPool:
        """A pool whose programs run on an interpreter that has `requirements`."""


class RequirementsPools(ProvidesRequirements):
    """Mixin of a pool with an interpreter (`self.python`): `for_requirements` hands back itself when that
    interpreter has the requirements, else a pool of the same kind on the requirements' venv (one per
    environment, made on first need). A subclass implements `_derive(python)` and calls `_close_derived()`
    from its `close()`."""

    python: str

    @abstractmethod
    def _derive(self, python: str) -> SandboxPool:
        """A pool of the same kind and limits on the interpreter `python`."""

    def for_requirements(self, requirements: Sequence[str]) -> SandboxPool:
        key = tuple(sorted(requirements))
        lock = self.__dict__.setdefault("_derived_lock", threading.Lock())
        with lock:
            derived: dict[tuple[str, ...], Any] = self.__dict__.setdefault("_derived", {})
            if key not in derived:
                if env.satisfied(key, self.python):
                    derived[key] = self
                else:
                    try:
                        python = env.ensure_env(list(key), env.env_cache())
                    except env.EnvError as exc:
                        raise UserError(f"the task's requirements do not install: {exc}",
                                        field="requirements",
                                        fix="pin versions that exist for this Python, or fix the "
                                            "package index"
                                        ) from None
                    derived[key] = self._derive(str(python))
            return derived[key]

    def _close_derived(self) -> None:
        for pool in list(self.__dict__.pop("_derived", {}).values()):
            if pool is not self:
                pool.close()
