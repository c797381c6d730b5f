"""An in-process double of the sandbox pool for the tests of other layers: a Python callable answers
commands."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from typing_extensions import Self

from rlvr.sandbox.base import FileMap, iter_safe_paths
from rlvr.sandbox.limits import merged
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus


@dataclass
class FakeCall:
    """What a fake sandbox was asked to run, as the handler sees it."""

    argv: list[str]
    """The command."""
    stdin: bytes
    """Its standard input."""
    limits: ExecLimits
    """The limits it would have run under: the fields the caller set over the pool's defaults
    (`limits.merged`)."""
    files: dict[str, bytes]
    """The whole workspace; the handler may change it (writes persist within the lease)."""
    mounts: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """Read-only material of the lease (sandbox path -> FileMap)."""
    image: str | None = None
    """The image reference the lease asked for (None: the host root)."""
    network: bool = False
    """Whether the lease asked for network access."""
    scratch: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """The lease's scratch directories (sandbox path -> its files), empty at the start of every run; the
    handler may write into them, and `read` reads them back by absolute path."""


Handler = Callable[[FakeCall], ExecResult | str | int]
"""Answers one call: an ExecResult, or stdout text (status ok), or an exit code."""


def _read_dir(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """A mount given as a host directory: its regular files (the real pool copies it at lease time)."""
    root = Path(path)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else bytes(content)


class FakeSandbox:
    """A workspace held in memory."""

    def __init__(self, pool: FakePool, mounts: dict[str, dict[str, bytes]], image: str | None = None,
                 network: bool = False, scratch: Sequence[str] = ()) -> None:
        self.pool = pool
        self.files: dict[str, bytes] = {}
        self.mounts = mounts
        self.image, self.network = image, network
        self.scratch: dict[str, dict[str, bytes]] = {t: {} for t in scratch}

    def write_files(self, files: FileMap) -> None:
        for rel, content in iter_safe_paths(files):
            self.files[rel] = _as_bytes(content)

    def read_files(self, paths: Sequence[str] | None = None) -> dict[str, str]:
        keys = sorted(self.files) if paths is None else [p for p in paths if p in self.files]
        return {k: self.files[k].decode("utf-8", errors="replace") for k in keys}

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), channel: bool = False) -> ExecResult:
        if not argv:
            raise ValueError("empty argv")
        if files:
            self.write_files(files)
        limits = merged(self.pool.limits, limits)
        self.scratch = {t: {} for t in self.scratch}  # fresh for every run
        call = FakeCall(list(argv), _as_bytes(stdin or b""), limits, self.files, self.mounts, self.image,
                        self.network, self.scratch)
        self.pool.calls.append(call)
        t0 = time.perf_counter()
        answer = self.pool.handler(call)
        if isinstance(answer, ExecResult):
            result = answer
        elif isinstance(answer, str):
            result = ExecResult(status=ExecStatus.ok, exit_code=0, stdout=answer)
        else:
            code = int(answer)
            result = ExecResult(status=ExecStatus.ok if code == 0 else ExecStatus.exit_nonzero,
                                exit_code=code)
        update: dict[str, object] = {"wall_s": result.wall_s or time.perf_counter() - t0}
        if read:
            update["files"] = {**self.read_files([p for p in read if not p.startswith("/")]),
                               **self._read_scratch([p for p in read if p.startswith("/")])}
        return result.model_copy(update=update)

    def _read_scratch(self, paths: Sequence[str]) -> dict[str, str]:
        out = {}
        for path in paths:
            for target, files in self.scratch.items():
                rel = path[len(target) + 1:] if path.startswith(target + "/") else None
                if rel in files:
                    out[path] = files[rel].decode("utf-8", errors="replace")
        return out


class FakePool:
    """SandboxPool double: `FakePool(lambda call: "42\\n")`. Records every call in `calls`."""

    def __init__(self, handler: Handler | None = None, limits: ExecLimits | None = None) -> None:
        self.handler: Handler = handler or (lambda call: 0)
        self.limits = limits or ExecLimits()
        self.calls: list[FakeCall] = []
        self.leases = 0
        self.open_leases = 0
        self.closed = False

    @contextmanager
    def lease(self, files: FileMap | None = None,
              mounts: Mapping[str, FileMap | str | os.PathLike[str]] | None = None, *,
              image: str | None = None, network: bool = False,
              scratch: Sequence[str] = ()) -> Iterator[FakeSandbox]:
        staged = {k: {rel: _as_bytes(c) for rel, c in iter_safe_paths(v if isinstance(v, Mapping) else
                                                                       _read_dir(v))}
                  for k, v in (mounts or {}).items()}
        sb = FakeSandbox(self, staged, image, network, scratch)
        self.leases += 1
        self.open_leases += 1
        try:
            if files:
                sb.write_files(files)
            yield sb
        finally:
            self.open_leases -= 1
            sb.files = {}

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (),
            mounts: dict[str, FileMap] | None = None,
            channel: bool = False, *, image: str | None = None, network: bool = False,
            scratch: Sequence[str] = ()) -> ExecResult:
        with self.lease(mounts=mounts, image=image, network=network, scratch=scratch) as sb:
            return sb.run(argv, files=files, stdin=stdin, limits=limits, read=read, channel=channel)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
