"""The isolated local backend: a self-healing warm pool of bubblewrap workers, each serving one job at a time.

Containment (see docs/SECURITY.md): each worker is a bubblewrap container with its own mount, PID, network,
IPC and UTS namespaces whose root holds only read-only system directories and the Python installation. Its
zygotes (`zygote.py`; a warm one with pytest imported, a lean one for other jobs) each keep job processes
forked ahead of the next jobs, each in fresh PID, mount, IPC and network namespaces with fresh tmpfs at
/workspace, /tmp and /dev/shm, waiting, already unprivileged with no_new_privs and a seccomp filter, to set
rlimits and run its job; the zygote supervises the job itself. Per-worker cgroups bound memory and processes.
A crashed or hung worker is replaced by a pre-started spare and its job retried once, then reported as
`infra_error`.

The container each worker runs is laid out in `container.py`; one worker's process, job frames and results
are `worker.py`; this module keeps the pool: leases, workers acquired and replaced, spares refilled, teardown.
"""
from __future__ import annotations

import atexit
import os
import queue
import secrets
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from typing_extensions import Self

from rlvr.sandbox import cgroups, imagecache, workspace
from rlvr.sandbox.base import FileMap
from rlvr.sandbox.container import (
    Container,
    Mounts,
    find_bwrap,
    inner_interpreter,
    job_env,
    stage_mounts,
    stage_scratch,
    write_etc,
)
from rlvr.sandbox.environments import Environment, EnvironmentPools
from rlvr.sandbox.image_container import ImageContainer, image_env
from rlvr.sandbox.limits import merged
from rlvr.sandbox.podman import ImageError
from rlvr.sandbox.requirements import RequirementsPools
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.sandbox.rootfs import host_path
from rlvr.sandbox.wire import copy_out
from rlvr.sandbox.worker import START_TIMEOUT_S, Worker, WorkerLost, job_result
from rlvr.sandbox.zygote import CHAINS_AHEAD, WORKSPACE, python_fast_path

SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"})
"""Programs that are a shell: refused in an image without /bin/sh (`BwrapPool.needs_shell`)."""
JOB_GRACE_S = 10.0
"""Extra seconds a worker may take beyond a job's timeout (workspace copies) before it counts as hung."""


def scratch_dir() -> str:
    """Where pools keep leases: /dev/shm when it is a writable tmpfs (no disk I/O, and removing a lease
    costs microseconds instead of a journalled, discarded ext4 rmdir), else the system temp dir."""
    shm = "/dev/shm"
    if not (os.path.isdir(shm) and os.access(shm, os.W_OK)):
        return tempfile.gettempdir()
    free = os.statvfs(shm)
    if free.f_bavail * free.f_frsize > 1 << 30:
        return shm
    return tempfile.gettempdir()


class IsolatedSandbox:
    """One leased workspace of a BwrapPool: files persist between `run` calls of the lease."""

    def __init__(self, pool: BwrapPool, lease_id: str, mounts: list[list[str]],
                 scratch: list[list[str]] | None = None) -> None:
        self.pool = pool
        self.lease_id = lease_id
        self.mounts = mounts
        self.scratch = scratch or []
        self.dir = pool.base / "leases" / lease_id
        self.root = self.dir / "ws"
        self._lock = threading.Lock()  # runs of one lease are serialised: each copies the workspace back

    def write_files(self, files: FileMap) -> None:
        workspace.write_files(self.root, files)

    def read_files(self, paths: Sequence[str] | None = None) -> dict[str, str]:
        return workspace.read_files(self.root, paths)

    def read_bytes(self, path: str) -> bytes | None:
        """The raw bytes of one workspace file, or of a file under a scratch directory by its absolute path
        as the last run left it (None when it is not a regular file)."""
        for name, target in self.scratch:
            if path.startswith(target + "/"):
                return workspace.read_file(self.dir / name, path[len(target) + 1:])
        return workspace.read_file(self.root, path)

    def _read(self, paths: Sequence[str]) -> dict[str, str]:
        """`read` of a run: workspace paths, and absolute paths under the lease's scratch directories."""
        if not any(p.startswith("/") for p in paths):
            return self.read_files(paths)
        found = ((p, self.read_bytes(p)) for p in paths)
        return {p: data.decode("utf-8", errors="replace") for p, data in found if data is not None}

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), channel: bool = False) -> ExecResult:
        """Write `files`, run `argv` in /workspace, read back `read`. The fields `limits` sets replace the
        pool's defaults, the others keep them (`rlvr.sandbox.limits.merged`).

        `argv[0] == "python"` is the sandbox's interpreter (this venv's, with its site-packages read-only),
        served by a warm forked interpreter for `-c`, `-m` and script invocations. With `channel=True` the
        program gets an extra pipe on fd 3 whose bytes come back in `ExecResult.channel`; it is a separate
        stream from stdout, but the program can write to it too. `read` may also name files under the lease's
        scratch directories by their absolute paths (what this run left there).
        """
        if not argv:
            raise ValueError("empty argv")
        self.pool.needs_shell(str(argv[0]))
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        with self._lock:
            if files:
                self.write_files(files)
            result = self.pool.execute(self, [str(a) for a in argv], data, merged(self.pool.limits, limits),
                                       channel)
            if read:
                result = result.model_copy(update={"files": self._read(read)})
        return result


class BwrapPool(RequirementsPools, EnvironmentPools):
    """Warm, self-healing pool of isolated workers. Use `lease()` (a context manager) or one-shot `run()`.

    A lease may ask for an image (a reference: `rlvr.sandbox.images`) and for network access; the pool keeps a
    warm pool per image and network setting for them (`rlvr.sandbox.environments`). `allow_network` lets
    leases ask for network; `image_cache` is the root-filesystem cache (default `imagecache.cache_dir()`);
    `image_pools` how many image pools stay warm; `trust_image_python=False` never runs the zygote on an
    image's own Python (its jobs are then exec'd). `environment` is what this pool's own workers run in (the
    host root without network, unless the pool is one of another's image pools)."""

    def __init__(self, limits: ExecLimits | None = None, workers: int = 2, python: str | None = None,
                 warm: Sequence[str] = ("pytest",), spares: int = 1, *, allow_network: bool = False,
                 image_cache: str | None = None, image_pools: int = 4, trust_image_python: bool = True,
                 probe: bool = False, environment: Environment | None = None, derived: bool = False) -> None:
        self.bwrap = find_bwrap()
        self.limits = limits or ExecLimits()
        self.workers = workers
        self.python = python or sys.executable
        # what the sandbox runs: the same interpreter, relocated when its prefix sits where the sandbox
        # mounts its own tmpfs (a checkout under /tmp, for instance)
        self.inner_python, self._relocated = inner_interpreter(self.python)
        self.allow_network, self.image_cache, self.image_pools = allow_network, image_cache, image_pools
        self.trust_image_python, self.probe, self.derived = trust_image_python, probe, derived
        self.environment = environment or Environment()
        self.open_leases = 0
        """Leases an owning pool has opened here (`EnvironmentPools.release`)."""
        root = self.environment.root
        self.warm = list(warm) if root is None or self.environment.supervisor == "image" else []
        # Processes in a worker's pids cgroup that are not the program's: each template's zygote and its
        # prepared chains (an init and a D each), less the running job's D, which is the program itself.
        self._supervisors = (2 if self.warm else 1) * (1 + 2 * CHAINS_AHEAD) - 1
        self.env = job_env(self.inner_python) if root is None else image_env(root)
        self.pool_id = f"{os.getpid()}-{secrets.token_hex(4)}"
        _sweep_stale()
        self.cgroups = cgroups.detect(self.pool_id)
        self.base = Path(tempfile.mkdtemp(prefix=f"rlvr-sbx-{self.pool_id}-", dir=scratch_dir()))
        self.base.chmod(0o700)  # the candidate user must not traverse the control dir
        (self.base / "leases").mkdir()
        for name in self.cgroups.bind_names():
            (self.base / "cg" / name).mkdir(parents=True, exist_ok=True)
        self.container = self._container()
        self._ids = iter(range(10**9))
        self._idle: queue.Queue[Worker] = queue.Queue()
        self._spares: queue.Queue[Worker] = queue.Queue()
        self._spare_target = spares
        self._lock = threading.Lock()
        self._busy: set[Worker] = set()
        self._closed = False
        self._wake = threading.Event()
        self.restarts = 0
        try:
            started = [self._start_worker() for _ in range(workers + spares)]
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

    def _container(self) -> Container:
        env, etc = self.environment, write_etc(self.base)
        args = (self.bwrap, self.python, self.inner_python, self._relocated, self.base)
        sizes = (self.limits.workspace_mb, self.limits.memory_mb, tuple(self.warm), env.network)
        if env.root is None:
            return Container(*args, etc, self.env, *sizes)
        self._image_use = imagecache.Cache(imagecache.cache_dir(self.image_cache)).use(env.root.id)
        return ImageContainer(*args, env.root.etc, self.env, *sizes, image=env.root,
                              supervisor=env.supervisor, probe=env.probe)

    # --------------------------------------------------------------------------------------- workers
    def _start_worker(self) -> Worker:
        """A new worker (not yet ready: call its `wait_ready`)."""
        wid = next(self._ids)
        return Worker(wid, self.container, self.cgroups.worker(wid), self.base / f"worker-{wid}.log")

    def _refill_loop(self) -> None:
        while not self._closed:
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            while not self._closed and self._spares.qsize() < self._spare_target:
                try:
                    w = self._start_worker()
                    w.wait_ready()
                except Exception:  # noqa: BLE001  # a failed spare start is retried
                    time.sleep(0.5)
                    continue
                if self._closed:
                    w.kill()
                    return
                self._spares.put(w)

    def _replace(self, w: Worker) -> Worker:
        """Retire a broken worker and hand back a live one (a warm spare when there is one)."""
        w.kill()
        self.restarts += 1
        try:
            fresh = self._spares.get_nowait()
        except queue.Empty:
            fresh = self._start_worker()
            fresh.wait_ready()
        self._wake.set()
        return fresh

    def _acquire(self) -> Worker:
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
                  "scratch": sb.scratch, "channel": channel, "env": self.env}
        warm = self.wants_warm(argv)
        w = self._acquire()
        self._busy.add(w)
        error = ""
        try:
            for attempt in (1, 2):
                before = w.cg.prepare(limits.memory_mb, limits.processes + self._supervisors)
                try:
                    reply, blobs = w.request(header, stdin, time.monotonic() + limits.timeout_s + JOB_GRACE_S,
                                             warm)
                except WorkerLost as exc:
                    error = f"sandbox worker lost (attempt {attempt}): {exc}"
                    self._busy.discard(w)
                    w = self._replace(w)
                    self._busy.add(w)
                    continue
                return job_result(reply, blobs, w.cg.usage(before), limits, time.perf_counter() - t0, attempt)
        finally:
            self._busy.discard(w)
            self._idle.put(w)
        return ExecResult(status=ExecStatus.infra_error, error=error, attempts=2,
                          wall_s=time.perf_counter() - t0)

    def needs_shell(self, program: str) -> None:
        """Refuse a shell command in an image without /bin/sh: one line naming the image and the fix, rather
        than a job that fails with 127 for the image's fault."""
        root = self.environment.root
        if root is None or root.shell or program not in SHELLS:
            return
        name = root.refs[0] if root.refs else root.id[:12]
        raise ImageError(f"image {name} has no shell (/bin/sh) and a command here needs one ({program})",
                         field="image",
                         fix="build the image FROM one with a shell, such as debian:bookworm-slim")

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
    def lease(self, files: FileMap | None = None, mounts: Mounts | None = None, *, image: str | None = None,
              network: bool = False, scratch: Sequence[str] = ()) -> Iterator[IsolatedSandbox]:
        """A fresh workspace for as many `run` calls as needed; torn down whatever happens.

        `mounts` maps absolute sandbox paths (outside /workspace, /tmp and system directories) to trusted
        material, a host directory (copied at lease time) or a FileMap, that every run of this lease sees
        read-only: a verifier's harness or hidden tests, e.g. `lease(files, mounts={"/harness": hidden_dir})`.
        The candidate can read but never change it, and other leases never see it.

        `scratch` names absolute sandbox paths (the same rules) that every run of the lease sees as fresh,
        empty, writable directories (a tmpfs owned by the job's user, sized like its /tmp); what a run leaves
        there is read back by that run's `read` (absolute paths), never carried into the next run. A verifier
        gives its own run a place to write its results that nothing before the run could have planted
        (`lease(files, scratch=["/logs"])`).

        `image` runs the lease in an image (a reference, `rlvr.sandbox.images`; None: the host root) and
        `network` gives its jobs network access (refused unless the pool allows it). In an image the workspace
        starts as a copy of the image's WORKDIR (when it has a safe one) and is mounted there as well as at
        /workspace; `files` go over it.
        """
        if self._closed:
            raise RuntimeError("sandbox pool is closed")
        if image is not None or network:
            target = self.environment_pool(image, network, hold=True)
            try:
                with target.lease(files, mounts, scratch=scratch) as sb:
                    yield sb
            finally:
                self.release(target)
            return
        lease_id = secrets.token_hex(8)
        d = self.base / "leases" / lease_id
        try:
            d.mkdir()  # never parents=True: a closed pool's directory must not come back
            self._seed(d)
            sb = IsolatedSandbox(self, lease_id, stage_mounts(d, mounts or {}),
                                 stage_scratch(scratch, mounts or {}))
            if files:
                sb.write_files(files)
            yield sb
        finally:
            workspace.remove_tree(d)

    def _seed(self, lease_dir: Path) -> None:
        """The lease's workspace: empty, or in an image with a WORKDIR, a copy of what the image holds there
        (regular files, directories and links; never following one)."""
        root = self.environment.root
        src = None if root is None or root.workdir == WORKSPACE else host_path(root.rootfs, root.workdir)
        if src is None or not src.is_dir():
            (lease_dir / "ws").mkdir()
            return
        fd = os.open(lease_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            # no budget: a copy too big for the workspace fails the run, with a reason
            copy_out(str(src), fd, "ws", 1 << 62)
        finally:
            os.close(fd)

    def run(self, argv: Sequence[str], files: FileMap | None = None, stdin: str | bytes | None = None,
            limits: ExecLimits | None = None, read: Sequence[str] = (), mounts: Mounts | None = None,
            channel: bool = False, *, image: str | None = None, network: bool = False,
            scratch: Sequence[str] = ()) -> ExecResult:
        """A one-shot lease: fresh workspace, one command, files read back, everything torn down."""
        with self.lease(mounts=mounts, image=image, network=network, scratch=scratch) as sb:
            return sb.run(argv, files=files, stdin=stdin, limits=limits, read=read, channel=channel)

    def _derive(self, python: str) -> BwrapPool:
        """A pool like this one on another interpreter (a task's requirements venv), no spares."""
        return BwrapPool(self.limits, workers=self.workers, python=python, warm=self.warm, spares=0,
                         allow_network=self.allow_network, derived=True)

    def _start_environment(self, env: Environment) -> BwrapPool:
        """A pool like this one whose workers run in `env` (an image, network), no spares."""
        return BwrapPool(self.limits, workers=self.workers, python=self.python, warm=self.warm, spares=0,
                         environment=env, image_cache=self.image_cache)

    def worker_pids(self) -> list[int]:
        """Host PIDs of the bubblewrap processes of the serving workers (for recovery tests and
        benchmarks)."""
        return [w.proc.pid for w in list(self._idle.queue)]

    def close(self) -> None:
        """Stop every worker, remove every cgroup and temporary directory. Idempotent."""
        with self._lock:
            if self._closed and not self.base.exists():
                return
            self._closed = True
        self._close_derived()
        self._close_environments()
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
        if getattr(self, "_image_use", None) is not None:
            os.close(self._image_use)  # a prune may remove the image now
            self._image_use = None
        _LIVE.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
