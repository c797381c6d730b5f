"""`isolation = "none"`: plain subprocesses in a temporary directory. No containment at all.

Only for trusted code and for machines without bubblewrap when the user asked for it explicitly; creating
this pool warns loudly.
"""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from typing_extensions import Self

from rlvr import links
from rlvr.errors import UserError
from rlvr.sandbox import workspace
from rlvr.sandbox.base import FileMap, iter_safe_paths, network_refused
from rlvr.sandbox.limits import merged
from rlvr.sandbox.requirements import RequirementsPools
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus

SCRUBBED_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


class UnsafeSandbox:
    """A workspace directory on the host; commands run as plain subprocesses in their own session."""

    def __init__(self, root: Path, python: str, default_limits: ExecLimits) -> None:
        self.root = root
        self.python = python
        self.default_limits = default_limits

    def write_files(self, files: FileMap) -> None:
        for rel, content in iter_safe_paths(files):
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content, encoding="utf-8")

    def read_files(self, paths: Sequence[str] | None = None) -> dict[str, str]:
        out: dict[str, str] = {}
        if paths is None:
            cands = [p.relative_to(self.root).as_posix() for p in sorted(self.root.rglob("*"))
                     if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts]
        else:
            cands = list(paths)
        for rel in cands:
            p = self.root / rel
            if p.is_file() and not p.is_symlink() and p.resolve().is_relative_to(self.root.resolve()):
                out[rel] = p.read_bytes().decode("utf-8", errors="replace")
        if paths is None:  # as the isolated pool reads them: links inside the workspace, never out of it
            for rel, real in links.through(self.root, links.classify(self.root)[0]).items():
                out.setdefault(rel, (self.root / real).read_bytes().decode("utf-8", errors="replace"))
        return out

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = ()) -> ExecResult:
        limits = merged(self.default_limits, limits)
        if files:
            self.write_files(files)
        argv = [self.python if a == "python" else a for a in argv]
        data = stdin.encode() if isinstance(stdin, str) else stdin
        t0 = time.perf_counter()
        try:
            env = {**SCRUBBED_ENV, "HOME": str(self.root),
                   # the interpreter's scripts first
                   "PATH": f"{Path(self.python).parent}:{SCRUBBED_ENV['PATH']}"}
            proc = subprocess.Popen(argv, cwd=self.root, env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:
            return ExecResult(status=ExecStatus.exit_nonzero, exit_code=127, stderr=str(exc),
                              wall_s=time.perf_counter() - t0)
        timed_out = False
        try:
            out, err = proc.communicate(data, timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leave no stray grandchildren
        except ProcessLookupError:
            pass
        cap = limits.output_bytes
        rc = proc.returncode
        if timed_out:
            status = ExecStatus.timeout
        elif len(out) > cap or len(err) > cap:
            status = ExecStatus.output_limit
        elif rc == 0:
            status = ExecStatus.ok
        else:
            status = ExecStatus.exit_nonzero
        return ExecResult(
            status=status, exit_code=rc if rc is not None and rc >= 0 else None,
            signal=-rc if rc is not None and rc < 0 else None,
            stdout=out[:cap].decode("utf-8", "replace"), stderr=err[:cap].decode("utf-8", "replace"),
            stdout_truncated=len(out) > cap, stderr_truncated=len(err) > cap,
            wall_s=time.perf_counter() - t0, files=self.read_files(read) if read else {},
        )


class UnsafePool(RequirementsPools):
    """A pool of UnsafeSandbox workspaces. Warns on creation: nothing is contained."""

    def __init__(self, limits: ExecLimits | None = None, python: str | None = None, warn: bool = True,
                 allow_network: bool = False) -> None:
        import sys

        if warn:
            warnings.warn("sandbox isolation is OFF (isolation='none'): candidate code runs with "
                          "your privileges",
                          RuntimeWarning, stacklevel=2)
        self.limits = limits or ExecLimits()
        self.python = python or sys.executable
        self.allow_network = allow_network

    @contextmanager
    def lease(self, files: FileMap | None = None, *, image: str | None = None,
              network: bool = False) -> Iterator[UnsafeSandbox]:
        """A workspace directory on the host. Programs have the host's network whatever `network` says
        (nothing is contained), but a task that asks for it is still refused unless allowed; an image cannot
        be run here."""
        if image is not None:
            raise UserError(f"isolation = \"none\" cannot run a task in an image ({image})",
                            field="sandbox.isolation", fix='use isolation = "bwrap"')
        if network and not self.allow_network:
            raise network_refused()
        root = Path(tempfile.mkdtemp(prefix="rlvr-ws-"))
        try:
            sb = UnsafeSandbox(root, self.python, self.limits)
            if files:
                sb.write_files(files)
            yield sb
        finally:
            workspace.remove_tree(root)

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), *, image: str | None = None,
            network: bool = False) -> ExecResult:
        with self.lease(image=image, network=network) as sb:
            return sb.run(argv, files=files, stdin=stdin, limits=limits, read=read)

    def _derive(self, python: str) -> UnsafePool:
        return UnsafePool(self.limits, python=python, warn=False, allow_network=self.allow_network)

    def close(self) -> None:
        self._close_derived()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
