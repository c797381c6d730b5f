"""The sandbox contract: a `Sandbox` runs commands on one workspace; a `SandboxPool` leases sandboxes.

Backends implement these two small protocols (a local isolated backend, an unisolated one for explicit
`isolation = "none"`, an in-process double for tests, Ray actors). Callers always acquire through the
context manager `pool.lease()`, which tears the workspace down whatever happens.

Limits: a pool holds the sandbox defaults (`limits`, from `[sandbox]`); the `limits` a caller passes to `run`
are laid over them per field (the fields it set win, the rest keep the defaults; see `rlvr.sandbox.limits`).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from rlvr.sandbox.result import ExecLimits, ExecResult

FileMap = Mapping[str, str | bytes]
"""Relative POSIX path -> content, written into the workspace before a command."""


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

    def lease(self, files: FileMap | None = None) -> AbstractContextManager[Sandbox]:
        ...

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = ()) -> ExecResult:
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
