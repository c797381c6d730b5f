"""Per-worker cgroups on the host (v1 or v2): memory and process limits, peak memory, CPU time, OOM kills.

The pool creates one cgroup per worker under `rlvr/<pool-id>/` and bind-mounts it into that worker; the
worker's zygote joins it once by writing 0 to `cgroup.procs`, and every job inherits it by fork. Limits are
set and counters read here, on the host, by trusted code (through descriptors kept open, rewriting a limit
only when it changes); the sandbox only ever joins. Jobs of one worker run one at a time, so per-job figures
are deltas of the worker's counters (with the peak-memory counter reset before each job).
"""
from __future__ import annotations

import os
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import SandboxUnavailable

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "rlvr"


@dataclass(frozen=True)
class JobUsage:
    """What the kernel counted for one job."""

    peak_memory_mb: float
    """Peak memory of the job's process tree (MiB)."""
    cpu_s: float
    """CPU seconds of the job's process tree."""
    oom_killed: bool
    """The memory limit was hit and the OOM killer ran."""
    pids_hit: bool
    """A fork or clone failed at the process limit."""


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""


def _field(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return 0


def _write(p: Path, value: str) -> None:
    p.write_text(value)


def _destroy_tree(root: Path, procs_file: str = "cgroup.procs") -> None:
    """Kill every process left in a cgroup tree, then remove it, deepest first."""
    if not root.is_dir():
        return
    dirs = sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True)
    for d in [*dirs, root]:
        for _ in range(50):
            pids = [int(x) for x in _read(d / procs_file).split()]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)


class WorkerCgroup:
    """The cgroup(s) of one worker: bind these into the sandbox; set limits and read usage per job."""

    def __init__(self, backend: CgroupBackend, dirs: dict[str, Path]) -> None:
        self.backend = backend
        self.dirs = dirs
        self._fds: dict[Path, int] = {}
        self._wfds: dict[Path, int] = {}
        self._written: dict[Path, str] = {}
        self._paths: dict[tuple[str, str], Path] = {}

    def file(self, controller: str, name: str) -> Path:
        """The path of a control file, built once (a job reads several, and path joins add up)."""
        key = (controller, name)
        p = self._paths.get(key)
        if p is None:
            p = self._paths[key] = self.dirs[controller] / name
        return p

    def rewrite(self, p: Path, value: bytes) -> None:
        """Write a control file through a descriptor kept open (a counter reset, written before every job)."""
        fd = self._wfds.get(p)
        if fd is None:
            fd = self._wfds[p] = os.open(p, os.O_WRONLY | os.O_CLOEXEC)
        os.pwrite(fd, value, 0)

    def read(self, p: Path) -> str:
        """Read a control file through a descriptor kept open (a job reads several: opening each costs
        more)."""
        fd = self._fds.get(p)
        if fd is None:
            try:
                fd = self._fds[p] = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return ""
        try:
            return os.pread(fd, 4096, 0).decode()
        except OSError:
            return ""

    def write_once(self, p: Path, value: str) -> None:
        """Write a limit unless this worker's cgroup already holds it (only the pool ever writes it)."""
        if self._written.get(p) != value:
            self._written.pop(p, None)
            _write(p, value)
            self._written[p] = value

    def close_fds(self) -> None:
        for fd in [*self._fds.values(), *self._wfds.values()]:
            os.close(fd)
        self._fds.clear()
        self._wfds.clear()

    def binds(self) -> list[tuple[Path, str]]:
        """(host dir, name) pairs to bind at /.rlvr/cg/<name> inside the worker."""
        return [(d, name) for name, d in self.dirs.items()]

    def procs_files(self) -> list[str]:
        """Paths inside the sandbox that a job's init writes 0 to."""
        return self.backend.procs_files(self)

    def zygote_procs_files(self) -> list[str]:
        """Paths inside the sandbox that the worker's zygote joins once at start (jobs inherit them)."""
        return self.backend.zygote_procs_files(self)

    def prepare(self, memory_mb: int, processes: int) -> dict[str, int]:
        return self.backend.prepare(self, memory_mb, processes)

    def usage(self, before: dict[str, int]) -> JobUsage:
        return self.backend.usage(self, before)

    def destroy(self) -> None:
        self.close_fds()
        for d in self.dirs.values():
            _destroy_tree(d)


class CgroupBackend(ABC):
    """Common shape of the v1 and v2 backends."""

    name = ""

    def __init__(self, pool_id: str) -> None:
        self.pool_id = pool_id

    @abstractmethod
    def bind_names(self) -> list[str]:
        """Names of the directories a worker binds at /.rlvr/cg/<name>."""

    @abstractmethod
    def worker(self, index: int) -> WorkerCgroup:
        """Create the cgroup(s) of worker `index`."""

    @abstractmethod
    def procs_files(self, cg: WorkerCgroup) -> list[str]:
        """Sandbox-side paths a job's init joins (none: jobs inherit the zygote's cgroups)."""

    def zygote_procs_files(self, cg: WorkerCgroup) -> list[str]:
        """Sandbox-side paths the zygote joins once; none by default."""
        return []

    @abstractmethod
    def prepare(self, cg: WorkerCgroup, memory_mb: int, processes: int) -> dict[str, int]:
        """Set one job's limits; return the counters to diff against afterwards."""

    @abstractmethod
    def usage(self, cg: WorkerCgroup, before: dict[str, int]) -> JobUsage:
        """What the job used."""

    @abstractmethod
    def pool_dirs(self) -> list[Path]:
        """The pool's top cgroup directories (removed on close)."""


class CgroupV1(CgroupBackend):
    """Legacy hierarchies: memory and pids required, cpuacct used when mounted."""

    name = "v1"

    def __init__(self, pool_id: str) -> None:
        super().__init__(pool_id)
        self.controllers = [c for c in ("memory", "pids", "cpuacct") if (CGROUP_ROOT / c / "tasks").exists()]

    def pool_dirs(self) -> list[Path]:
        return [CGROUP_ROOT / c / PREFIX / self.pool_id for c in self.controllers]

    def bind_names(self) -> list[str]:
        return list(self.controllers)

    def worker(self, index: int) -> WorkerCgroup:
        dirs = {}
        for c in self.controllers:
            d = CGROUP_ROOT / c / PREFIX / self.pool_id / f"w{index}"
            d.mkdir(parents=True, exist_ok=True)
            dirs[c] = d
        return WorkerCgroup(self, dirs)

    def procs_files(self, cg: WorkerCgroup) -> list[str]:
        return []

    def zygote_procs_files(self, cg: WorkerCgroup) -> list[str]:
        # Every cgroup migration takes the global threadgroup lock for an RCU grace period, stalling every
        # fork and exit on the host (a running job's exit included) for milliseconds, and a v1 memory
        # migration takes 10-20 ms. So the zygote joins once and jobs inherit its cgroups by fork. Pages
        # it held before joining stay charged to the parent; what it allocates later is a few KiB,
        # subtracted as the baseline of each job's peak; its CPU while a job runs (forking the next
        # chain) is counted in the job's cpu_s, as on cgroup v2.
        return [f"/.rlvr/cg/{name}/cgroup.procs" for name in cg.dirs]

    def prepare(self, cg: WorkerCgroup, memory_mb: int, processes: int) -> dict[str, int]:
        limit = str(memory_mb << 20)
        files = [cg.file("memory", f) for f in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")]
        if cg._written.get(files[0]) != limit:
            files = [f for f in files if f.exists()]
            if int(limit) > int(cg.read(files[0]) or 0):
                files.reverse()  # memory <= memory+swap must hold at every step: raise the outer bound first
            for f in files:
                cg.write_once(f, limit)
        cg.rewrite(cg.file("memory", "memory.max_usage_in_bytes"), b"0")
        cg.write_once(cg.file("pids", "pids.max"), str(processes))
        return {"oom": _field(cg.read(cg.file("memory", "memory.oom_control")), "oom_kill"),
                "pids": _field(cg.read(cg.file("pids", "pids.events")), "max"),
                "mem": int(cg.read(cg.file("memory", "memory.usage_in_bytes")) or 0),
                "cpu": int(cg.read(cg.file("cpuacct", "cpuacct.usage")) or 0) if "cpuacct" in cg.dirs else 0}

    def usage(self, cg: WorkerCgroup, before: dict[str, int]) -> JobUsage:
        cpu = "cpuacct" in cg.dirs
        return JobUsage(
            peak_memory_mb=max(int(cg.read(cg.file("memory", "memory.max_usage_in_bytes"))
                                   or 0) - before["mem"],
                               0) / 2**20,
            cpu_s=(int(cg.read(cg.file("cpuacct", "cpuacct.usage")) or 0) - before["cpu"]) / 1e9 if cpu
            else 0.0,
            oom_killed=_field(cg.read(cg.file("memory", "memory.oom_control")), "oom_kill") > before["oom"],
            pids_hit=_field(cg.read(cg.file("pids", "pids.events")), "max") > before["pids"],
        )


class CgroupV2(CgroupBackend):
    """Unified hierarchy: one leaf per worker that the zygote joins; per-job figures are deltas.

    Peak memory needs a resettable `memory.peak` (Linux 6.12+: a write resets it for the writing file
    descriptor, which is kept open); without one it is reported as 0.
    """

    name = "v2"

    def __init__(self, pool_id: str, root: Path) -> None:
        super().__init__(pool_id)
        self.root = root
        self._peak_fds: dict[Path, int] = {}

    def pool_dirs(self) -> list[Path]:
        return [self.root / f"{PREFIX}-{self.pool_id}"]

    def bind_names(self) -> list[str]:
        return ["unified"]

    def worker(self, index: int) -> WorkerCgroup:
        pool = self.pool_dirs()[0]
        pool.mkdir(exist_ok=True)
        _write(pool / "cgroup.subtree_control", "+memory +pids")
        w = pool / f"w{index}"
        w.mkdir(exist_ok=True)
        return WorkerCgroup(self, {"unified": w})

    def procs_files(self, cg: WorkerCgroup) -> list[str]:
        return []

    def zygote_procs_files(self, cg: WorkerCgroup) -> list[str]:
        return ["/.rlvr/cg/unified/cgroup.procs"]

    def prepare(self, cg: WorkerCgroup, memory_mb: int, processes: int) -> dict[str, int]:
        d = cg.dirs["unified"]
        _write(d / "memory.max", str(memory_mb << 20))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(processes))
        fd = self._peak_fds.get(d)
        if fd is None and (d / "memory.peak").exists():
            fd = self._peak_fds[d] = os.open(d / "memory.peak", os.O_RDWR)
        if fd is not None:
            try:
                os.write(fd, b"reset\n")
            except OSError:
                os.close(fd)
                self._peak_fds[d] = fd = -1
        return {"oom": _field(_read(d / "memory.events"), "oom_kill"),
                "pids": _field(_read(d / "pids.events"), "max"),
                "cpu": _field(_read(d / "cpu.stat"), "usage_usec")}

    def usage(self, cg: WorkerCgroup, before: dict[str, int]) -> JobUsage:
        d = cg.dirs["unified"]
        fd = self._peak_fds.get(d, -1)
        peak = int(os.pread(fd, 64, 0) or b"0") if fd is not None and fd >= 0 else 0
        return JobUsage(
            peak_memory_mb=peak / 2**20,
            cpu_s=(_field(_read(d / "cpu.stat"), "usage_usec") - before["cpu"]) / 1e6,
            oom_killed=_field(_read(d / "memory.events"), "oom_kill") > before["oom"],
            pids_hit=_field(_read(d / "pids.events"), "max") > before["pids"],
        )


def _v2_root() -> Path | None:
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        controllers = _read(root / "cgroup.controllers").split()
        if {"memory", "pids"} <= set(controllers):
            return root
    return None


def detect(pool_id: str) -> CgroupBackend:
    """The usable cgroup backend, or SandboxUnavailable with the reason and the fix."""
    if os.geteuid() != 0:
        raise SandboxUnavailable("the isolated sandbox needs root (cgroups, mounts, an "
                                 "unprivileged job user)",
                                 fix="run as root, or set sandbox.isolation = 'none' for trusted code only")
    if (CGROUP_ROOT / "memory" / "tasks").exists() and (CGROUP_ROOT / "pids" / "tasks").exists():
        return CgroupV1(pool_id)
    root = _v2_root()
    if root is not None:
        return CgroupV2(pool_id, root)
    raise SandboxUnavailable("no usable cgroup memory and pids controllers under /sys/fs/cgroup (v1 or v2)",
                             fix="mount the cgroup v1 memory and pids hierarchies or enable them "
                                 "in cgroup v2")


def sweep_stale(alive: set[str]) -> None:
    """Remove cgroups of pools whose owning process is gone (ids look like `<pid>-<token>`)."""
    parents = [CGROUP_ROOT / c / PREFIX for c in ("memory", "pids", "cpuacct")]
    candidates = [d for p in parents if p.is_dir() for d in p.iterdir() if d.is_dir()]
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if root.is_dir():
            candidates += [d for d in root.glob(f"{PREFIX}-*") if d.is_dir()]
    for d in candidates:
        pool_id = d.name.removeprefix(f"{PREFIX}-")
        if pool_id in alive:
            continue
        pid = pool_id.split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _destroy_tree(d)
