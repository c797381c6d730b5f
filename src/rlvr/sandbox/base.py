"""The sandbox contract: a `Sandbox` runs commands on one workspace; a `SandboxPool` leases sandboxes.

Backends implement these two small protocols (a local isolated backend, an unisolated one for explicit
`isolation = "none"`, an in-process double for tests, Ray actors). Callers always acquire through the
context manager `pool.lease()`, which tears the workspace down whatever happens. A lease runs on the host root
without network unless it asks for an image or for network (`environment_of(task)` gives a task's arguments).

Limits: a pool holds the sandbox defaults (`limits`, from `[sandbox]`); the `limits` a caller passes to `run`
are laid over them per field (the fields it set win, the rest keep the defaults; see `rlvr.sandbox.limits`).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rlvr.errors import UserError
from rlvr.sandbox.result import ExecLimits, ExecResult

FileMap = Mapping[str, str | bytes]
"""Relative POSIX path -> content, written into the workspace before a command."""


def network_refused() -> UserError:
    """What a pool raises for a lease that asks for network access its config does not allow."""
    return UserError("the task asks for network access and the run's config does not allow it",
                     field="sandbox.allow_network",
                     fix="set [sandbox] allow_network = true to let tasks that ask for it reach the network")


@runtime_checkable
class Sandbox(Protocol):
    """One leased workspace. Files persist between `run` calls of the same lease, never across leases."""

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = ()) -> ExecResult:
        """Write `files`, run `argv` in the workspace under `limits` over the pool's defaults, read back the
        paths in `read`."""
        ...

    def write_files(self, files: FileMap) -> None:
        """Write files into the workspace (parents created; paths must stay inside it)."""
        ...

    def read_files(self, paths: Sequence[str] | None = None) -> dict[str, str]:
        """Read files back (None: every regular file). Missing paths are left out."""
        ...


@runtime_checkable
class SandboxPool(Protocol):
    """A pool of sandboxes. `lease` yields a fresh workspace; `run` is a one-shot lease."""

    limits: ExecLimits
    """The sandbox defaults: what a command runs under where no layer of `rlvr.sandbox.limits` sets a
    field."""

    def lease(self, files: FileMap | None = None, *, image: str | None = None,
              network: bool = False) -> AbstractContextManager[Sandbox]:
        """A fresh workspace, torn down on exit. `image`: an image reference (`rlvr.sandbox.images`) whose
        root the jobs run in (None: the host root); `network`: the jobs reach the network (refused where the
        pool does not allow it). A pool without images raises UserError for an image."""
        ...

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), *, image: str | None = None,
            network: bool = False) -> ExecResult:
        """A one-shot lease (`lease`) running one command."""
        ...

    def close(self) -> None:
        ...


def iter_safe_paths(files: FileMap) -> Iterator[tuple[str, str | bytes]]:
    """Validate relative paths: no absolute paths, no `..`, no empty names. Raises ValueError."""
    for rel, content in files.items():
        parts = rel.replace("\\", "/").split("/")
        if rel.startswith("/") or any(p in ("", "..") for p in parts):
            raise ValueError(f"unsafe workspace path {rel!r}")
        yield "/".join(parts), content


def environment_of(task: object) -> dict[str, Any]:
    """The lease arguments of a task's environment: `image` (a reference) and `network`, only those it sets,
    so that a task on the host root without network leases exactly as before (any pool, any test double). A
    relative path in the reference is the task directory's (`task.source`, when it is one)."""
    image, network = getattr(task, "image", None), bool(getattr(task, "network", False))
    if image:
        from rlvr.sandbox.images import parse

        source = getattr(task, "source", None)
        ref = parse(image)
        if ref.local and source and Path(source).is_dir():
            image = str(ref.absolute(source))
    return {k: v for k, v in (("image", image), ("network", network)) if v}


def in_environment(pool: SandboxPool, image: str | None = None, network: bool = False) -> SandboxPool:
    """`pool` itself for the host root without network; else a view of it whose every lease and run asks for
    `image` and `network` (keyword arguments of the pool's own, such as `mounts`, pass through; an `image` or
    `network` a caller names itself wins: a verifier whose tests run in an image of their own asks for it)."""
    return pool if image is None and not network else InEnvironment(pool, image, network)


class InEnvironment:
    """A SandboxPool view that leases in one environment (see `in_environment`)."""

    def __init__(self, pool: SandboxPool, image: str | None, network: bool) -> None:
        self.pool, self.image, self.network = pool, image, network
        self.limits = pool.limits

    def _env(self) -> dict[str, Any]:
        return {k: v for k, v in (("image", self.image), ("network", self.network)) if v}

    def lease(self, files: FileMap | None = None, **kwargs: Any) -> AbstractContextManager[Sandbox]:
        return self.pool.lease(files, **{**self._env(), **kwargs})  # type: ignore[call-arg]

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), **kwargs: Any) -> ExecResult:
        return self.pool.run(argv, files, stdin, limits, read,  # type: ignore[call-arg]
                             **{**self._env(), **kwargs})

    def close(self) -> None:
        """The pool it views is closed by its owner."""
