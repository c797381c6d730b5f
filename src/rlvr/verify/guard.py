"""The guard process: a long-lived child that runs verifier work on candidate input under a memory limit and a
timeout, so that whatever third-party code does with that input (sympy evaluating `9**9**9**9`, a mesh file
that declares a billion vertices), the verifier process survives it."""
from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
GUARD_TIMEOUT_S = 10.0
GUARD_MEMORY_MB = 1024
WARM_TIMEOUT_S = 300.0
"""How long the guard process may take to import what a call needs (not counted against the call)."""
_LEN = struct.Struct("<Q")


def _send(stream: Any, obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _recv_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _Worker:
    """One long-lived child interpreter (running `_serve`) that runs guarded calls one at a time.

    Killed and restarted when a call overruns its time or dies (out of memory), so the verifier process itself
    never runs third-party parsers on candidate input.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.owner = os.getpid()

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1"}
        return subprocess.Popen([sys.executable, "-c", "from rlvr.verify.guard import _serve; _serve()"],
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, close_fds=True)

    def _stop(self) -> None:
        if self.proc is not None and os.getpid() == self.owner:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
        self.proc = None

    def _reply(self, deadline: float) -> tuple[bool, Any] | None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        head = _recv_exact(fd, _LEN.size, deadline)
        body = _recv_exact(fd, _LEN.unpack(head)[0], deadline) if head else None
        return None if body is None else pickle.loads(body)  # type: ignore[no-any-return]

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float, memory_mb: int,
             warm: tuple[str, ...]) -> tuple[bool, Any]:
        if os.getpid() != self.owner:  # a forked copy of this process: the parent's worker is not ours
            self.proc, self.lock, self.owner = None, threading.Lock(), os.getpid()
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                _send(self.proc.stdin, (fn.__module__, fn.__qualname__, args, memory_mb, warm))
            except (BrokenPipeError, OSError):
                self._stop()
                return False, "the guard process died"
            # imports are not the input's fault: the clock starts once the worker has loaded what it needs
            ready = self._reply(time.monotonic() + WARM_TIMEOUT_S)
            if ready is None or not ready[0]:
                self._stop()
                return (False,
                        f"the guard process could not load {fn.__module__}: {ready[1] if ready else 'died'}")
            deadline = time.monotonic() + timeout_s
            result = self._reply(deadline)
            if result is None:
                timed_out = time.monotonic() >= deadline
                self._stop()
                return (False,
                        f"took longer than {timeout_s:g} s" if timed_out else "ran out of memory or crashed")
            return result


_WORKER = _Worker()
atexit.register(_WORKER._stop)


def guarded(fn: Callable[..., T], *args: Any, timeout_s: float | None = None, memory_mb: int | None = None,
            warm: tuple[str, ...] = ()) -> tuple[bool, T | str]:
    """Run `fn(*args)` in the guard process with a memory limit and a wall-clock timeout.

    For work on candidate input that third-party code may blow up on (sympy evaluating `9**9**9**9`, a mesh
    file that declares a billion vertices): the verifier process survives whatever the input does. `fn` must
    be a module-level function, and its arguments and result must pickle. Returns (True, result) or
    (False, why). Calls are serialised through one process; limits default to GUARD_TIMEOUT_S and
    GUARD_MEMORY_MB (read at call time). `warm` names modules to import before the clock starts.
    """
    timeout_s = GUARD_TIMEOUT_S if timeout_s is None else timeout_s
    memory_mb = GUARD_MEMORY_MB if memory_mb is None else memory_mb
    return _WORKER.call(fn, args, timeout_s, memory_mb, warm)


def _serve() -> None:
    """The guard process: run requests from stdin, one at a time, each under an extra memory allowance."""
    import importlib
    import resource

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints of the called code must not corrupt the reply stream
    while True:
        head = requests.read(_LEN.size)
        if len(head) < _LEN.size:
            return
        module, qualname, args, memory_mb, warm = pickle.loads(requests.read(_LEN.unpack(head)[0]))
        try:
            for name in (*warm, module):
                importlib.import_module(name)
            fn: Any = importlib.import_module(module)
            for part in qualname.split("."):
                fn = getattr(fn, part)
        except BaseException as exc:  # noqa: BLE001
            _send(replies, (False, f"{type(exc).__name__}: {exc!s:.200}"))
            continue
        _send(replies, (True, "ready"))
        with open("/proc/self/statm") as f:  # allowance on top of what is already mapped
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (memory_mb << 20), resource.RLIM_INFINITY))
        try:
            result: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001  (whatever the input did, report it as data)
            result = (False, f"{type(exc).__name__}: {exc!s:.200}")
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        try:
            _send(replies, result)
        except Exception:  # noqa: BLE001  (an unpicklable result)
            _send(replies, (False, "unpicklable result"))


