"""The isolated local backend: a self-healing warm pool of bubblewrap workers, each serving one job at a time.

Containment (see docs/SECURITY.md): each worker is a bubblewrap container with its own mount, PID, network,
IPC and UTS namespaces whose root holds only read-only system directories and the Python installation. Its
zygotes (`zygote.py`; a warm one with pytest imported, a lean one for other jobs) each keep job processes
forked ahead of the next jobs, each in fresh PID, mount, IPC and network namespaces with fresh tmpfs at
/workspace, /tmp and /dev/shm, waiting, already unprivileged with no_new_privs and a seccomp filter, to set
rlimits and run its job; the zygote supervises the job itself. Per-worker cgroups bound memory and processes. A crashed or hung worker is replaced
by a pre-started spare and its job retried once, then reported as `infra_error`.

Over 500 lines on purpose: the worker lifecycle (start, warm-up, job, replacement) and the per-job
accounting against its cgroups are one state machine; split, each half would reach into the other's state.
"""
from __future__ import annotations

import atexit
import json
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from typing_extensions import Self

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import cgroups, workspace
from rlvr.sandbox.base import FileMap
from rlvr.sandbox.limits import merged
from rlvr.sandbox.requirements import RequirementsPools
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.sandbox.wire import recv_frame, send_frame
from rlvr.sandbox.zygote import CHAINS_AHEAD, python_fast_path

SANDBOX_UID = 65534
"""The unprivileged user (nobody) that sandboxed programs run as."""
JOB_GRACE_S = 10.0
"""Extra seconds a worker may take beyond a job's timeout (workspace copies) before it counts as hung."""
START_TIMEOUT_S = 60.0
ZYGOTE = Path(__file__).with_name("zygote.py")
WIRE = Path(__file__).with_name("wire.py")
RESERVED = ("/", "/workspace", "/tmp", "/proc", "/dev", "/.rlvr", "/usr", "/etc", "/bin", "/sbin", "/lib",
            "/lib64", "/opt/rlvr")
Mounts = Mapping[str, "str | os.PathLike[str] | FileMap"]
"""Sandbox path -> host directory (copied) or FileMap, mounted read-only for the lease."""


SHADOWED_ROOTS = ("/tmp", "/dev", "/proc", "/workspace", "/.rlvr", "/opt/rlvr")
"""Sandbox paths that hold the sandbox's own mounts: host files under them are not visible inside."""
RELOCATED_PREFIX = "/opt/rlvr/prefix"


def _shadowed(path: str) -> bool:
    return any(path == r or path.startswith(r + "/") for r in SHADOWED_ROOTS)


def inner_interpreter(python: str) -> tuple[str, tuple[str, str] | None]:
    """The interpreter path inside the sandbox, and (host prefix, sandbox prefix) when it had to move.

    A venv under /tmp (a CI checkout, say) would be hidden by the sandbox's fresh /tmp, so its prefix is
    mounted read-only at RELOCATED_PREFIX instead; a venv finds its site-packages from the path it is run as.
    """
    python = os.path.abspath(python)
    prefix = os.path.dirname(os.path.dirname(python))
    if not _shadowed(os.path.realpath(prefix)) and not _shadowed(prefix):
        return python, None
    return RELOCATED_PREFIX + python[len(prefix):], (os.path.realpath(prefix), RELOCATED_PREFIX)


def job_env(python: str) -> dict[str, str]:
    """The fixed environment of every job: nothing of the host's leaks in. The interpreter's own directory
    comes first on PATH, so `python`, `pytest` and a venv's other scripts are the sandbox interpreter's."""
    return {"PATH": f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
            "USER": "sandbox", "LOGNAME": "sandbox", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


def scratch_dir() -> str:
    """Where pools keep leases: /dev/shm when it is a writable tmpfs (no disk I/O, and removing a lease
    costs microseconds instead of a journalled, discarded ext4 rmdir), else the system temp dir."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize > 1 << 30:
        return shm
    return tempfile.gettempdir()


def find_bwrap() -> str:
    path = shutil.which("bwrap") or ("/usr/bin/bwrap" if os.path.exists("/usr/bin/bwrap") else None)
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed",
                                 fix="apt-get install -y bubblewrap (or `make system-deps`)")
    return path


class _WorkerLost(Exception):
    """The worker died, hung or spoke garbage: an infrastructure fault, not the program's."""


class _Worker:
    """Host handle of one bubblewrap container running the zygote."""

    def __init__(self, pool: BwrapPool, wid: int) -> None:
        self.pool = pool
        self.wid = wid
        self.cg = pool.cgroups.worker(wid)
        self.log = pool.base / f"worker-{wid}.log"
        # the lean template's request pipe (see zygote._fork_lean); without warm modules one template serves all
        self.lean_rfd, self.lean_wfd = os.pipe() if pool.warm else (-1, -1)
        try:
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(pool.bwrap_argv(self), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=log, env={"PATH": "/usr/bin:/bin"}, close_fds=True,
                                             pass_fds=(self.lean_rfd,) if pool.warm else ())
        finally:
            if self.lean_rfd >= 0:
                os.close(self.lean_rfd)
        self.rfd, self.wfd = self.proc.stdout.fileno(), self.proc.stdin.fileno()  # type: ignore[union-attr]
        if self.lean_wfd < 0:
            self.lean_wfd = self.wfd

    def wait_ready(self) -> None:
        try:
            header, _ = recv_frame(self.rfd, time.monotonic() + START_TIMEOUT_S)
        except (EOFError, TimeoutError, ValueError) as exc:
            tail = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
            self.kill()
            raise SandboxUnavailable(f"sandbox worker failed to start: {exc}: {' '.join(tail.split())}",
                                     fix="run `rlvr sandbox check`") from None
        if not header.get("ready"):
            self.kill()
            raise SandboxUnavailable("sandbox worker sent no ready signal", fix="run `rlvr sandbox check`")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, header: dict, stdin: bytes, deadline: float, warm: bool) -> tuple[dict, list[bytes]]:
        """Send a job to the warm or the lean template and wait for its result frame."""
        try:
            send_frame(self.wfd if warm else self.lean_wfd, header, stdin)
            reply, blobs = recv_frame(self.rfd, deadline)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            raise _WorkerLost(f"{type(exc).__name__}: {exc}") from None
        if "error" in reply:
            raise _WorkerLost(reply["error"])
        return reply, blobs

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        if self.lean_wfd != self.wfd:
            try:
                os.close(self.lean_wfd)
            except OSError:
                pass
            self.lean_wfd = self.wfd
        self.cg.destroy()
        self.log.unlink(missing_ok=True)


class IsolatedSandbox:
    """One leased workspace of a BwrapPool: files persist between `run` calls of the lease."""

    def __init__(self, pool: BwrapPool, lease_id: str, mounts: list[list[str]]) -> None:
        self.pool = pool
        self.lease_id = lease_id
        self.mounts = mounts
        self.dir = pool.base / "leases" / lease_id
        self.root = self.dir / "ws"
        self._lock = threading.Lock()  # runs of one lease are serialised: each copies the workspace back

    def write_files(self, files: FileMap) -> None:
        workspace.write_files(self.root, files)

    def read_files(self, paths: Sequence[str] | None = None) -> dict[str, str]:
        return workspace.read_files(self.root, paths)

    def read_bytes(self, path: str) -> bytes | None:
        """The raw bytes of one workspace file (None when it is not a regular file)."""
        return workspace.read_file(self.root, path)

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), channel: bool = False) -> ExecResult:
        """Write `files`, run `argv` in /workspace, read back `read`. The fields `limits` sets replace the
        pool's defaults, the others keep them (`rlvr.sandbox.limits.merged`).

        `argv[0] == "python"` is the sandbox's interpreter (this venv's, with its site-packages read-only),
        served by a warm forked interpreter for `-c`, `-m` and script invocations. With `channel=True` the
        program gets an extra pipe on fd 3 whose bytes come back in `ExecResult.channel`; it is a separate
        stream from stdout, but the program can write to it too.
        """
        if not argv:
            raise ValueError("empty argv")
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        with self._lock:
            if files:
                self.write_files(files)
            result = self.pool.execute(self, [str(a) for a in argv], data, merged(self.pool.limits, limits), channel)
            if read:
                result = result.model_copy(update={"files": self.read_files(read)})
        return result


class BwrapPool(RequirementsPools):
    """Warm, self-healing pool of isolated workers. Use `lease()` (a context manager) or one-shot `run()`."""

    def __init__(self, limits: ExecLimits | None = None, workers: int = 2, python: str | None = None,
                 warm: Sequence[str] = ("pytest",), spares: int = 1) -> None:
        self.bwrap = find_bwrap()
        self.limits = limits or ExecLimits()
        self.workers = workers
        self.python = python or sys.executable
        # what the sandbox runs: the same interpreter, relocated when its prefix sits where the sandbox
        # mounts its own tmpfs (a checkout under /tmp, for instance)
        self.inner_python, self._relocated = inner_interpreter(self.python)
        self.warm = list(warm)
        # Processes in a worker's pids cgroup that are not the program's: each template's zygote and its
        # prepared chains (an init and a D each), less the running job's D, which is the program itself.
        self._supervisors = (2 if self.warm else 1) * (1 + 2 * CHAINS_AHEAD) - 1
        self.env = job_env(self.inner_python)
        self.pool_id = f"{os.getpid()}-{secrets.token_hex(4)}"
        _sweep_stale()
        self.cgroups = cgroups.detect(self.pool_id)
        self.base = Path(tempfile.mkdtemp(prefix=f"rlvr-sbx-{self.pool_id}-", dir=scratch_dir()))
        self.base.chmod(0o700)  # the candidate user must not traverse the control dir
        (self.base / "leases").mkdir()
        for name in self.cgroups.bind_names():
            (self.base / "cg" / name).mkdir(parents=True, exist_ok=True)
        self._etc = self._write_etc()
        self._ids = iter(range(10**9))
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._spares: queue.Queue[_Worker] = queue.Queue()
        self._spare_target = spares
        self._lock = threading.Lock()
        self._busy: set[_Worker] = set()
        self._closed = False
        self._wake = threading.Event()
        self.restarts = 0
        try:
            started = [_Worker(self, next(self._ids)) for _ in range(workers + spares)]
            for w in started:
                w.wait_ready()
        except BaseException:
            self.close()
            raise
        for w in started[:workers]:
            self._idle.put(w)
        for w in started[workers:]:
            self._spares.put(w)
        self._refill = threading.Thread(target=self._refill_loop, name="rlvr-sandbox-spares", daemon=True)
        self._refill.start()
        _LIVE.add(self)

    # ------------------------------------------------------------------------------------------ set-up
    def _write_etc(self) -> Path:
        etc = self.base / "etc"
        etc.mkdir()
        (etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
                                    "sandbox:/tmp:/bin/sh\n")
        (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n")
        (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
        (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files\n")
        return etc

    def bwrap_argv(self, w: _Worker) -> list[str]:
        """The bubblewrap command line of one worker."""
        a = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--hostname",
             "sandbox", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                a += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                a += ["--ro-bind", top, top]
        for f in ("ld.so.cache", "ld.so.conf", "localtime"):
            if os.path.exists(f"/etc/{f}"):
                a += ["--ro-bind", f"/etc/{f}", f"/etc/{f}"]
        if os.path.isdir("/etc/alternatives"):
            a += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
        for f in ("passwd", "group", "hosts", "nsswitch.conf"):
            a += ["--ro-bind", str(self._etc / f), f"/etc/{f}"]
        made: set[str] = set()
        # the chosen interpreter's own prefix too: a venv outside this one finds its site-packages there
        own_prefix = os.path.dirname(os.path.dirname(os.path.abspath(self.python)))
        prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, Path(self.python).parent, own_prefix)}
        prefixes.add(sys.prefix)
        if self._relocated is not None:
            prefixes.discard(self._relocated[0])
        for prefix in sorted(p for p in prefixes if not p.startswith("/usr/") and not _shadowed(p)):
            for anc in _ancestors(prefix):  # bwrap would copy the host's modes (/root is 0700)
                if anc not in made:
                    made.add(anc)
                    a += ["--perms", "0755", "--dir", anc]
            a += ["--ro-bind", prefix, prefix]
        a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/workspace",
              "--bind", str(self.base), "/.rlvr"]
        for host_dir, name in w.cg.binds():
            a += ["--bind", str(host_dir), f"/.rlvr/cg/{name}"]
        a += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/opt/rlvr",
              "--ro-bind", str(ZYGOTE), "/opt/rlvr/zygote.py", "--ro-bind", str(WIRE), "/opt/rlvr/wire.py"]
        if self._relocated is not None:
            a += ["--ro-bind", self._relocated[0], self._relocated[1]]
        a += ["--chdir", "/", "--clearenv"]
        for k, v in self.env.items():
            a += ["--setenv", k, v]
        config = {"uid": SANDBOX_UID, "gid": SANDBOX_UID, "procs": w.cg.procs_files(),
                  "zygote_procs": w.cg.zygote_procs_files(), "python": self.inner_python,
                  "workspace_mb": self.limits.workspace_mb, "memory_mb": self.limits.memory_mb,
                  "warm": self.warm, "inodes": 20000}
        if w.lean_rfd >= 0:
            config["lean_fd"] = w.lean_rfd
        return a + [self.inner_python, "/opt/rlvr/zygote.py", json.dumps(config)]

    # --------------------------------------------------------------------------------------- workers
    def _refill_loop(self) -> None:
        while not self._closed:
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            while not self._closed and self._spares.qsize() < self._spare_target:
                try:
                    w = _Worker(self, next(self._ids))
                    w.wait_ready()
                except Exception:  # noqa: BLE001  # a failed spare start is retried
                    time.sleep(0.5)
                    continue
                if self._closed:
                    w.kill()
                    return
                self._spares.put(w)

    def _replace(self, w: _Worker) -> _Worker:
        """Retire a broken worker and hand back a live one (a warm spare when there is one)."""
        w.kill()
        self.restarts += 1
        try:
            fresh = self._spares.get_nowait()
        except queue.Empty:
            fresh = _Worker(self, next(self._ids))
            fresh.wait_ready()
        self._wake.set()
        return fresh

    def _acquire(self) -> _Worker:
        if self._closed:
            raise RuntimeError("sandbox pool is closed")
        while True:
            try:
                w = self._idle.get(timeout=0.5)
                break
            except queue.Empty:
                if self._closed:
                    raise RuntimeError("sandbox pool is closed") from None
        while not w.alive():  # died while idle: it held no job, so replacing it costs the job no attempt
            w = self._replace(w)
        return w

    # ------------------------------------------------------------------------------------------- jobs
    def execute(self, sb: IsolatedSandbox, argv: list[str], stdin: bytes, limits: ExecLimits,
                channel: bool) -> ExecResult:
        """Run one job on a worker; a lost worker is replaced and the job retried once, then infra_error."""
        t0 = time.perf_counter()
        header = {"lease": sb.lease_id, "argv": argv, "limits": limits.model_dump(), "mounts": sb.mounts,
                  "channel": channel, "env": self.env}
        warm = self.wants_warm(argv)
        w = self._acquire()
        self._busy.add(w)
        error = ""
        try:
            for attempt in (1, 2):
                before = w.cg.prepare(limits.memory_mb, limits.processes + self._supervisors)
                try:
                    reply, blobs = w.request(header, stdin, time.monotonic() + limits.timeout_s + JOB_GRACE_S, warm)
                except _WorkerLost as exc:
                    error = f"sandbox worker lost (attempt {attempt}): {exc}"
                    self._busy.discard(w)
                    w = self._replace(w)
                    self._busy.add(w)
                    continue
                return _result(reply, blobs, w.cg.usage(before), limits, time.perf_counter() - t0, attempt)
        finally:
            self._busy.discard(w)
            self._idle.put(w)
        return ExecResult(status=ExecStatus.infra_error, error=error, attempts=2, wall_s=time.perf_counter() - t0)

    def wants_warm(self, argv: Sequence[str]) -> bool:
        """Whether a job goes to the warm template (pytest imported) rather than the lean one.

        Scripts and `-m` modules (test runners, verification harnesses) may import a warm module anywhere,
        so they go warm; `-c` code only when it names one; commands that are exec'd (shells, `python` with
        other options) gain nothing from a warm parent. Either template gives the same isolation and the
        same results: the choice only decides what is already imported.
        """
        if not self.warm or argv[0] != "python":
            return False
        fast = python_fast_path(list(argv[1:]))
        if fast is None:
            return False
        mode, target, _ = fast
        return mode != "-c" or any(name in target for name in self.warm)

    @contextmanager
    def lease(self, files: FileMap | None = None, mounts: Mounts | None = None) -> Iterator[IsolatedSandbox]:
        """A fresh workspace for as many `run` calls as needed; torn down whatever happens.

        `mounts` maps absolute sandbox paths (outside /workspace, /tmp and system directories) to trusted
        material, a host directory (copied at lease time) or a FileMap, that every run of this lease sees
        read-only: a verifier's harness or hidden tests, e.g. `lease(files, mounts={"/harness": hidden_dir})`.
        The candidate can read but never change it, and other leases never see it.
        """
        if self._closed:
            raise RuntimeError("sandbox pool is closed")
        lease_id = secrets.token_hex(8)
        d = self.base / "leases" / lease_id
        try:
            d.mkdir()  # never parents=True: a closed pool's directory must not come back
            (d / "ws").mkdir()
            sb = IsolatedSandbox(self, lease_id, _stage_mounts(d, mounts or {}))
            if files:
                sb.write_files(files)
            yield sb
        finally:
            workspace.remove_tree(d)

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), mounts: Mounts | None = None,
            channel: bool = False) -> ExecResult:
        """A one-shot lease: fresh workspace, one command, files read back, everything torn down."""
        with self.lease(mounts=mounts) as sb:
            return sb.run(argv, files=files, stdin=stdin, limits=limits, read=read, channel=channel)

    def _derive(self, python: str) -> BwrapPool:
        """A pool like this one on another interpreter (a task's requirements venv), no spares."""
        return BwrapPool(self.limits, workers=self.workers, python=python, warm=self.warm, spares=0)

    def worker_pids(self) -> list[int]:
        """Host PIDs of the bubblewrap processes of the serving workers (for recovery tests and benchmarks)."""
        return [w.proc.pid for w in list(self._idle.queue)]

    def close(self) -> None:
        """Stop every worker, remove every cgroup and temporary directory. Idempotent."""
        with self._lock:
            if self._closed and not self.base.exists():
                return
            self._closed = True
        self._close_derived()
        self._wake.set()
        refill = getattr(self, "_refill", None)
        if refill is not None and refill is not threading.current_thread():
            refill.join(timeout=START_TIMEOUT_S)
        for q in (getattr(self, "_idle", None), getattr(self, "_spares", None)):
            while q is not None and not q.empty():
                q.get_nowait().kill()
        for d in self.cgroups.pool_dirs() if hasattr(self, "cgroups") else []:
            cgroups._destroy_tree(d)  # the parent dirs of the workers' cgroups
        workspace.remove_tree(self.base)
        _LIVE.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ancestors(path: str) -> list[str]:
    """/a/b/c -> ["/a", "/a/b"]."""
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _stage_mounts(lease_dir: Path, mounts: Mounts) -> list[list[str]]:
    """Copy trusted material under the lease dir; return [relative source, sandbox target] pairs."""
    staged: list[list[str]] = []
    for i, (target, source) in enumerate(sorted(mounts.items())):
        norm = os.path.normpath(target)
        if not target.startswith("/") or norm != target or any(
                norm == r or (r != "/" and norm.startswith(r + "/")) for r in RESERVED):
            raise ValueError(f"mount target {target!r} must be a normalised absolute path outside {RESERVED}")
        rel = f"ro/{i}"
        if isinstance(source, Mapping):
            (lease_dir / rel).mkdir(parents=True)
            workspace.write_files(lease_dir / rel, source)
        else:
            src = Path(source)
            if not src.is_dir():
                raise ValueError(f"mount source {str(src)!r} is not a directory")
            shutil.copytree(src, lease_dir / rel, symlinks=True)
        staged.append([rel, target])
    return staged


_STATUS_RULES: list[tuple[ExecStatus, Callable[[dict, cgroups.JobUsage], bool]]] = [
    (ExecStatus.memory_limit, lambda r, u: u.oom_killed),
    (ExecStatus.process_limit, lambda r, u: u.pids_hit),
    (ExecStatus.output_limit, lambda r, u: r["output_exceeded"]),
    (ExecStatus.file_limit, lambda r, u: r["signal"] == 25 or (r["exit_code"] != 0 and (
        r.get("workspace_full") or r.get("file_at_cap") or not r.get("workspace_copied", True)))),
    (ExecStatus.timeout, lambda r, u: r["timed_out"] or r["signal"] == 24),
    (ExecStatus.ok, lambda r, u: r["exit_code"] == 0),
]
"""First matching rule wins (SIGXFSZ is 25, SIGXCPU is 24); otherwise exit_nonzero."""


def _result(reply: dict, blobs: list[bytes], usage: cgroups.JobUsage, limits: ExecLimits, wall: float,
            attempts: int) -> ExecResult:
    out, err, chan = (blobs + [b"", b"", b""])[:3]
    status = next((s for s, rule in _STATUS_RULES if rule(reply, usage)), ExecStatus.exit_nonzero)
    return ExecResult(
        status=status, exit_code=reply["exit_code"], signal=reply["signal"],
        stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
        stdout_truncated=reply["stdout_total"] > limits.output_bytes,
        stderr_truncated=reply["stderr_total"] > limits.output_bytes,
        wall_s=wall, cpu_s=usage.cpu_s, peak_memory_mb=usage.peak_memory_mb, attempts=attempts,
        channel=chan.decode("utf-8", "replace"), error=reply.get("spawn_error") or None,
    )


_LIVE: weakref.WeakSet[BwrapPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_LIVE):
        pool.close()


def _sweep_stale() -> None:
    """Remove what pools of dead processes left behind: cgroups and temporary directories."""
    cgroups.sweep_stale({p.pool_id for p in _LIVE})
    for d in {p for root in (scratch_dir(), tempfile.gettempdir()) for p in Path(root).glob("rlvr-sbx-*")}:
        pid = d.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            workspace.remove_tree(d)
