"""One node's sandbox worker as a Ray actor: the node's local isolated pool and the workspaces (leases) opened
on it. rlvr.scale.ray_pool places one per node and routes jobs to them; nothing here knows about other
nodes."""
from __future__ import annotations

from typing import Any

import ray

from rlvr.config import SandboxConfig
from rlvr.sandbox.base import in_environment
from rlvr.sandbox.requirements import pool_for
from rlvr.sandbox.result import ExecLimits
from rlvr.tasks.spec import FinalState, Task


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

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "leases": len(self.leases)}

    def run(self, argv: list[str], files: dict[str, Any] | None, stdin: Any, limits: dict[str, Any] | None,
            read: list[str], requirements: list[str] | None = None, image: str | None = None,
            network: bool = False) -> dict[str, Any]:
        lim = None if limits is None else ExecLimits.model_validate(limits)  # only the fields the caller set
        pool = in_environment(pool_for(self.pool, requirements or ()), image, network)
        return pool.run(argv, files=files, stdin=stdin, limits=lim, read=read).model_dump(mode="json")

    def open_lease(self, lease_id: str, files: dict[str, Any] | None, requirements: list[str] | None = None,
                   image: str | None = None, network: bool = False) -> None:
        """Open a workspace (in `image`, with `network`: this node builds or pulls the image on first use)."""
        stack = self._stack_type()
        pool = in_environment(pool_for(self.pool, requirements or ()), image, network)
        sandbox = stack.enter_context(pool.lease(files))
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

    def verify(self, task: dict[str, Any], final: dict[str, Any], seed: int,
               extras: dict[str, Any]) -> dict[str, Any]:
        from rlvr.verify.base import VerifyContext, verify

        verdict = verify(Task.model_validate(task), FinalState.model_validate(final),
                         VerifyContext(pool=self.pool, seed=seed, extras=extras))
        return verdict.model_dump(mode="json")

    def shutdown(self) -> None:
        for lease_id in list(self.leases):
            self.close_lease(lease_id)
        self.pool.close()
