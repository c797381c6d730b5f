"""The warm worker inside bubblewrap: supervises jobs in processes prepared before each job arrives.

This file runs as a script inside the sandbox, so it imports only the standard library (and `wire.py` beside
it). A worker has two templates, each a zygote serving its own request pipe: the warm one (pytest imported
and run once) and a lean one forked before that warm-up, a third of its size, for jobs that do not need it
(see `_fork_lean`); the host picks one per job. Each zygote keeps two jobs' processes prepared ahead of
their requests (see `_serve`), and supervises each job itself when its request comes:

- init, PID 1 of a fresh PID namespace: a task that shares the zygote's memory and only waits
  (`wire.spawn_waiter`: no copy of the zygote and no exec), there to hold the namespace. Killing it makes
  the kernel kill every process of the namespace, detached ones included, and reaping it returns only
  when all of them are gone.
- D, forked by the zygote into that namespace (so D is PID 2 and the zygote's own child), owner of fresh
  mount, IPC and network namespaces: tmpfs at /workspace, /tmp and /dev/shm, its own /proc, only a loopback
  device, the control directory unmounted. It passes descriptors of its tmpfs roots and of its mount
  namespace to the zygote, drops to the unprivileged user with no_new_privs and a seccomp filter
  (`wire.seccomp_filter`), waits for the go, sets the job's rlimits and runs the command: `python
  -c/-m/script` in the already warm interpreter, anything else by exec; it ends with os._exit after
  flushing (never a full interpreter finalisation).

With a request the zygote copies the lease's files in through those descriptors, binds read-only material
into D's mount namespace, sends the go, drains output with caps, enforces the wall-clock timeout, kills init
(and so the namespace) when D ends, copies the workspace back (regular files, directories and symlinks,
never following links) and writes one result frame to the host. Per job that is one fork of a Python
process, and the job's result does not wait for any other process to be forked. A D that died before
its program started (killed from outside) costs the job nothing: it runs on the next chain. A zygote that
cannot prepare or run a job reports an error frame, which the host treats as an infrastructure fault.

Over 500 lines on purpose: it runs as a script inside the sandbox with only the standard library and
`wire.py`, and the job chain above is one sequence whose steps share the zygote's descriptors.
"""
from __future__ import annotations

import atexit
import json
import os
import runpy
import select
import signal
import sys
import time
import types

try:
    from rlvr.sandbox import wire
except ImportError:  # inside the sandbox: wire.py sits beside this script
    import wire  # type: ignore[no-redef]

CONTROL_DIR = "/.rlvr"
WORKSPACE = "/workspace"
TMPFS = (WORKSPACE, "/tmp", "/dev/shm")
CHAINS_AHEAD = 2
"""Chains each template keeps prepared (see `_serve`)."""
CHAIN_ATTEMPTS = 3
"""Chains a job may be tried on when their D dies before the program starts (killed from outside)."""
READ_ENDS = ("out", "err", "chan")
"""D's pipes the zygote reads (it writes the others: stdin and the go)."""
BASE_PATH: list[str] = []
"""The interpreter's sys.path without its first entry, as a fresh `python` would have it."""


class Job:
    """One decoded job request (see BwrapPool.execute for the producer)."""

    def __init__(self, header: dict, stdin: bytes) -> None:
        self.argv: list[str] = header["argv"]
        self.lease: str = header["lease"]
        self.limits: dict = header["limits"]
        self.mounts: list[list[str]] = header.get("mounts", [])
        self.scratch: list[list[str]] = header.get("scratch", [])
        self.channel: bool = header.get("channel", False)
        self.env: dict[str, str] = header["env"]
        self.stdin = stdin


class ChainLost(Exception):
    """D died or misbehaved before its job started: an infrastructure fault, reported as an error frame."""


# ------------------------------------------------------------------------------- the zygote's side
class Chain:
    """One prepared job: init and D, the zygote's ends of D's pipes, and (once D sent them) its
    descriptors."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.sizes = wire.tmpfs_sizes(config["workspace_mb"], config["memory_mb"])
        self.pipes = {name: os.pipe() for name in ("in", "out", "err", "chan", "go")}
        self.ends = {name: r if name in READ_ENDS else w for name, (r, w) in self.pipes.items()}
        """The zygote's ends of D's pipes, by name, until closed."""
        self.ctl, self.ctl_d = wire.socketpair()
        self.init_pid = self.d_pid = 0
        self.init_stack: object = None  # the waiter's stack: kept until it is reaped
        self.d_pidfd = -1
        self.d_status: int | None = None
        self.roots: list[int] = []  # descriptors of D's /workspace, /tmp, /dev/shm
        self.mnt_ns = -1
        self.made_dirs: list[str] = []  # mount points created for binds, removed after the job


def prepare(config: dict, own_pid_ns: int) -> Chain:
    """Start init in a fresh PID namespace and fork D into it; D sets itself up while the zygote goes on."""
    ch = Chain(config)
    try:
        # unshare(CLONE_NEWPID) only works while children would still be born into our own namespace,
        # so point that back first; the next child is then PID 1 of a fresh one, and later ones join it.
        wire.check_rc(wire.libc.setns(own_pid_ns, wire.CLONE_NEWPID), "setns")
        wire.check_rc(wire.libc.unshare(wire.CLONE_NEWPID), "unshare")
        try:
            ch.init_stack = wire.waiter_stack()
            ch.init_pid = wire.spawn_waiter(ch.init_stack)  # PID 1: only waits; dies with the worker
            ch.d_pid = os.fork()
            if ch.d_pid == 0:
                _candidate_main(ch)
        finally:
            wire.check_rc(wire.libc.setns(own_pid_ns, wire.CLONE_NEWPID), "setns")
        ch.d_pidfd = os.pidfd_open(ch.d_pid)
    except BaseException:
        dispose(ch)
        raise
    finally:
        for name, (r, w) in ch.pipes.items():  # keep only our ends: EOFs must reach their readers
            os.close(w if name in READ_ENDS else r)
        ch.pipes = {}
        ch.ctl_d.close()
    return ch


def dispose(ch: Chain) -> None:
    """Kill the chain's namespace, reap D and init (in that order: a dying init waits for D to be reaped),
    close every descriptor and remove the job's mount points. Safe on a partly prepared chain."""
    if ch.init_pid:
        _kill(ch.init_pid)
    if ch.d_pid and ch.d_status is None:
        _kill(ch.d_pid)
        ch.d_status = os.waitpid(ch.d_pid, 0)[1]
    if ch.init_pid:
        os.waitpid(ch.init_pid, 0)  # returns once every process of the namespace is gone
        ch.init_pid = 0
    ch.init_stack = None
    for fd in [ch.d_pidfd, *ch.roots]:
        if fd >= 0:
            os.close(fd)
    ch.d_pidfd, ch.roots = -1, []
    for name in list(ch.ends):
        _close_end(ch, name)
    ch.ctl.close()
    _remove_mount_points(ch)


def _close_end(ch: Chain, name: str) -> None:
    """Close the zygote's end of one of D's pipes, once."""
    fd = ch.ends.pop(name, -1)
    if fd >= 0:
        os.close(fd)


def _remove_mount_points(ch: Chain) -> None:
    """Remove the directories made for binds (the worker's root is shared by its jobs: no empty mount point
    of one job stays for the next). Dropping D's namespace first detaches what was mounted on them."""
    if ch.mnt_ns >= 0:
        os.close(ch.mnt_ns)
        ch.mnt_ns = -1
    for d in reversed(ch.made_dirs):
        try:
            os.rmdir(d)
        except OSError:
            pass
    ch.made_dirs = []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _take_roots(ch: Chain) -> None:
    """Receive D's tmpfs and namespace descriptors and its confirmation that it is confined."""
    try:
        msg, fds = wire.recv_fds(ch.ctl, 16, 8)
        if msg != b"m" or len(fds) != len(TMPFS) + 1:
            raise ChainLost(f"job process sent no descriptors ({msg[:40]!r})")
        *ch.roots, ch.mnt_ns = fds
        if ch.ctl.recv(16) != b"r":
            raise ChainLost("job process failed to confine itself")
    except OSError as exc:
        raise ChainLost(f"job process unreachable: {exc}") from None


def _started(ch: Chain) -> bool:
    """Whether D took the go and said so before becoming the program (it cannot be forged: D closes its
    end of the socket first). A D that died without it was lost before the job, not by the program."""
    return wire.recv_nowait(ch.ctl, 16) == b"s"


def run_job(ch: Chain, job: Job, own_mnt_ns: int) -> tuple[dict, list[bytes]]:
    """Run one job on a prepared chain: (result header, [stdout, stderr, channel])."""
    _take_roots(ch)
    lim = job.limits
    sizes = wire.tmpfs_sizes(lim["workspace_mb"], lim["memory_mb"])
    lease = f"{CONTROL_DIR}/leases/{job.lease}"
    trees, scratch = [], []
    try:
        try:
            for rel, target in job.mounts:
                trees.append((wire.clone_tree(f"{lease}/{rel}"), target))
                ch.made_dirs += _make_mount_point(target)
            for _, target in job.scratch:
                ch.made_dirs += _make_mount_point(target)
            if sizes != ch.sizes or trees or job.scratch:
                with _InMountNamespace(ch.mnt_ns, own_mnt_ns):
                    if sizes != ch.sizes:
                        _mount_tmpfs(ch.config, sizes, wire.MS_REMOUNT)
                    for tree, target in trees:
                        wire.attach_tree(tree, target)
                        wire.mount(None, target, None, wire.MS_REMOUNT | wire.MS_BIND | wire.MS_RDONLY
                                   | wire.MS_NOSUID | wire.MS_NODEV)
                    scratch = [(rel, _mount_scratch(ch.config, sizes, target)) for rel, target in job.scratch]
        finally:
            for tree, _ in trees:
                os.close(tree)
        return _run_prepared(ch, job, lease, scratch)
    finally:
        for _, fd in scratch:
            os.close(fd)


def _mount_scratch(config: dict, sizes: tuple[int, int, int], target: str) -> int:
    """A fresh tmpfs at `target` in D's namespace, owned by the job's user and sized like its /tmp; returns a
    descriptor of its root, for copying it out after the job."""
    opts = f"size={sizes[1]}m,nr_inodes={config['inodes']},mode=0755,uid={config['uid']},gid={config['gid']}"
    wire.mount("tmpfs", target, "tmpfs", wire.MS_NOSUID | wire.MS_NODEV, opts)
    return os.open(target, os.O_RDONLY | os.O_DIRECTORY)


def _run_prepared(ch: Chain, job: Job, lease: str,
                  scratch: list[tuple[str, int]]) -> tuple[dict, list[bytes]]:
    """The job on a chain whose mounts are in place: copy the workspace in, run, copy it (and the scratch
    directories) back out."""
    lim = job.limits
    ws = f"/proc/self/fd/{ch.roots[0]}"
    try:
        wire.copy_in(lease + "/ws", ws, ch.config["uid"], ch.config["gid"])
    except OSError as exc:  # the caller's files exceed the workspace limit: the program never starts
        return {"exit_code": None, "signal": None, "timed_out": False, "output_exceeded": False,
                "stdout_total": 0, "stderr_total": 0, "workspace_full": True,
                "spawn_error": f"the workspace does not fit its limits: {exc.strerror}"}, [b"", b"", b""]
    spec = {"argv": job.argv, "limits": lim, "env": job.env, "channel": job.channel}
    t0 = time.monotonic()
    try:
        wire.send_frame(ch.ends["go"], spec)
    except BrokenPipeError:
        raise ChainLost("job process gone before the go") from None
    _close_end(ch, "go")
    header, blobs = _drain(ch, job, t0)
    if not _started(ch):
        raise ChainLost("job process died before the program started")
    header["workspace_full"] = any(wire.nearly_full(f"/proc/self/fd/{fd}") for fd in ch.roots[:2])
    lease_fd = os.open(lease, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rename("ws", "ws.old", src_dir_fd=lease_fd, dst_dir_fd=lease_fd)
        header["workspace_copied"], largest = wire.copy_out(ws, lease_fd, "ws", lim["workspace_mb"] << 20)
        wire.rmtree_at(lease_fd, "ws.old")
        for rel, fd in scratch:  # the last run's scratch files, for the host to read (`read`)
            wire.rmtree_at(lease_fd, rel)
            wire.copy_out(f"/proc/self/fd/{fd}", lease_fd, rel, lim["workspace_mb"] << 20)
    finally:
        os.close(lease_fd)
    largest = max(largest, *(wire.largest_file(f"/proc/self/fd/{fd}") for fd in ch.roots[1:]))
    header["file_at_cap"] = largest >= lim["file_size_mb"] << 20
    _remove_mount_points(ch)
    return header, blobs


def _make_mount_point(target: str) -> list[str]:
    """Create the missing directories of a bind target (in the worker's root, which D's namespace shares);
    returns them in creation order."""
    missing = []
    parent = target
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for d in reversed(missing):
        os.mkdir(d, 0o755)
    return list(reversed(missing))


class _InMountNamespace:
    """Enter D's mount namespace for a few mount calls, then return to the zygote's own.

    The kernel lets only a thread that shares its filesystem context (root, cwd, umask) with no other thread
    change mount namespace: a template whose warm-up started native threads (`bpy` starts Blender's) shares it
    with them. `unshare(CLONE_FS)` first gives this thread a copy of its own (a no-op when it has one
    already); the other threads keep theirs, and D, forked from this thread, gets this one's."""

    def __init__(self, ns: int, own: int) -> None:
        self.ns, self.own = ns, own

    def __enter__(self) -> None:
        wire.check_rc(wire.libc.unshare(wire.CLONE_FS), "unshare fs")
        wire.check_rc(wire.libc.setns(self.ns, wire.CLONE_NEWNS), "setns mnt")

    def __exit__(self, *exc: object) -> None:
        wire.check_rc(wire.libc.setns(self.own, wire.CLONE_NEWNS), "setns mnt")


def _mount_tmpfs(config: dict, sizes: tuple[int, int, int], extra: int) -> None:
    uid, gid, inodes = config["uid"], config["gid"], config["inodes"]
    opts = [f"mode=0755,uid={uid},gid={gid}", "mode=1777", "mode=1777"]
    flags = wire.MS_NOSUID | wire.MS_NODEV
    for target, size, opt, more in zip(TMPFS, sizes, opts, (0, 0, wire.MS_NOEXEC)):
        wire.mount("tmpfs", target, "tmpfs", flags | more | extra, f"size={size}m,nr_inodes={inodes},{opt}")


def _drain(ch: Chain, job: Job, t0: float) -> tuple[dict, list[bytes]]:
    """Feed stdin, drain capped output, enforce the wall-clock limit, end the namespace. (header, blobs)."""
    cap = job.limits["output_bytes"]
    deadline = t0 + job.limits["timeout_s"]
    readers = {ch.ends[n]: n for n in READ_ENDS}
    kept: dict[str, list[bytes]] = {n: [] for n in readers.values()}
    total = dict.fromkeys(readers.values(), 0)
    stdin_fd = ch.ends["in"]
    pending = memoryview(job.stdin)
    if pending:
        os.set_blocking(stdin_fd, False)
    else:
        _close_end(ch, "in")
        stdin_fd = -1
    timed_out = exceeded = False
    while readers or ch.d_status is None:
        left = deadline - time.monotonic()
        if left <= 0 and ch.d_status is None and not timed_out:
            timed_out = True
            _kill(ch.init_pid)
        waits = list(readers) + ([ch.d_pidfd] if ch.d_status is None else [])
        r, w, _ = select.select(waits, [stdin_fd] if stdin_fd >= 0 else [], [], max(left, 0.05))
        if w:
            try:
                pending = pending[os.write(stdin_fd, pending[: 1 << 16]):]
            except BlockingIOError:
                pass
            except BrokenPipeError:  # the program closed its stdin: the rest is dropped, like a shell would
                pending = pending[:0]
            if not pending:
                _close_end(ch, "in")
                stdin_fd = -1
        for fd in r:
            if fd == ch.d_pidfd:
                ch.d_status = os.waitpid(ch.d_pid, 0)[1]
                _kill(ch.init_pid)  # D is done: whatever it left running (daemons, pipes held open) dies now
                continue
            chunk = os.read(fd, 1 << 16)
            name = readers[fd]
            if not chunk:
                _close_end(ch, name)
                del readers[fd]
                continue
            room = cap - total[name]
            if room > 0:
                kept[name].append(chunk[:room])
            total[name] += len(chunk)
            if total[name] > cap and name != "chan" and not exceeded:
                exceeded = True
                _kill(ch.init_pid)
    _close_end(ch, "in")
    os.waitpid(ch.init_pid, 0)  # every process of the job's namespace is gone: the workspace is still
    ch.init_pid = 0
    status = ch.d_status
    header = {
        "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timed_out": timed_out, "output_exceeded": exceeded,
        "stdout_total": total["out"], "stderr_total": total["err"], "run_s": time.monotonic() - t0,
    }
    return header, [b"".join(kept["out"]), b"".join(kept["err"]), b"".join(kept["chan"])]


# ------------------------------------------------------------------------------------------------- D
def _candidate_main(ch: Chain) -> None:
    """D: set up its namespaces, hand their descriptors over, confine itself, wait for the go, then become
    the program. Never returns.

    Everything that does not depend on the job (namespaces, mounts, the unprivileged user, no_new_privs,
    stdio, cwd) is done while idle, before the go; only the job's rlimits, environment and descriptors are
    set after it.
    """
    try:
        wire.prctl(wire.PR_SET_PDEATHSIG, signal.SIGKILL)
        p = ch.pipes
        ctl = ch.ctl_d.fileno()
        keep = sorted({p["in"][0], p["out"][1], p["err"][1], p["chan"][1], p["go"][0], ctl})
        low = 3
        for fd in keep:  # nothing of the zygote's (the host's pipes, other descriptors) reaches the program
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 16)
        os.setsid()
        # Fresh IPC and network namespaces too: System V shared memory, semaphores and message queues outlive
        # their creator, and so do TCP sockets in TIME_WAIT (a port the last job used stays taken for a
        # minute): in the worker's namespaces the next job would see them. A network namespace holds only a
        # loopback device, down until brought up; the kernel tears it down after the job, off its path.
        # A pool with network access keeps its workers' namespace, the one its user-mode network serves.
        network = ch.config.get("network", False)
        fresh = wire.CLONE_NEWNS | wire.CLONE_NEWIPC | (0 if network else wire.CLONE_NEWNET)
        wire.check_rc(wire.libc.unshare(fresh), "unshare")
        if not network:
            wire.loopback_up()
        wire.mount(None, "/", None, wire.MS_REC | wire.MS_PRIVATE)
        _mount_tmpfs(ch.config, ch.sizes, 0)
        workdir = ch.config.get("workdir", WORKSPACE)
        if workdir != WORKSPACE:  # an image's WORKDIR: the same tmpfs, seen at both paths
            wire.mount(WORKSPACE, workdir, None, wire.MS_BIND)
            wire.mount(None, workdir, None, wire.MS_REMOUNT | wire.MS_BIND | wire.MS_NOSUID | wire.MS_NODEV)
        wire.mount("proc", "/proc", "proc", wire.MS_NOSUID | wire.MS_NODEV | wire.MS_NOEXEC)
        roots = [os.open(t, os.O_RDONLY | os.O_DIRECTORY) for t in TMPFS]
        roots.append(os.open("/proc/self/ns/mnt", os.O_RDONLY))
        wire.send_fds(ch.ctl_d, b"m", roots)
        for fd in roots:
            os.close(fd)
        # The program never sees other leases, the cgroups or this worker's code. An unmount waits for an
        # RCU grace period (milliseconds on a loaded host): here it is off every job's path.
        for procs in ch.config["procs"]:
            with open(procs, "w") as f:
                f.write("0")
        wire.umount(CONTROL_DIR)
        for path in ch.config.get("hide", []):  # the supervisor's own runtime in an image (image_container)
            wire.umount(path)
        os.dup2(p["in"][0], 0)
        os.dup2(p["out"][1], 1)
        os.dup2(p["err"][1], 2)
        os.chdir(workdir)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # under the memory limit the program dies first, never its supervisors
        uid, gid = ch.config["uid"], ch.config["gid"]
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        wire.prctl(wire.PR_SET_NO_NEW_PRIVS, 1)
        wire.install_seccomp()  # no user namespaces (and so no mounts or namespaces), no rare kernel surface
        wire.prctl(wire.PR_SET_PDEATHSIG, signal.SIGKILL)  # after setresuid, which would clear it
        os.umask(0o022)
        ch.ctl_d.send(b"r")
    # before the go: the zygote reports the lost chain as an infra fault
    except BaseException:  # noqa: BLE001
        os._exit(126)
    go_r = p["go"][0]
    try:
        try:
            spec, _ = wire.recv_frame(go_r)
        except EOFError:
            os._exit(0)
        ch.ctl_d.send(b"s")  # the program starts: from here D's end is the program's, not the chain's
        ch.ctl_d.close()
        keep_fds = 3
        if spec["channel"]:
            os.dup2(p["chan"][1], 3)
            keep_fds = 4
        os.closerange(keep_fds, 1 << 16)
        wire.set_rlimits(spec["limits"])  # only lowers limits: allowed without privileges
        os.environ.clear()
        os.environ.update(spec["env"])
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"sandbox: job set-up failed: {exc}\n".encode())
        os._exit(126)
    _become(spec["argv"], spec["env"], ch.config)


def _become(argv: list[str], env: dict[str, str], config: dict) -> None:
    """Become the program. `python` is the sandbox's interpreter: run in this warm one where the zygote runs
    on it (`fast`), else exec'd (`python`: its path; None, in an image without one: looked up on PATH like any
    name)."""
    argv = list(argv)
    if argv[0] == "python":
        fast = python_fast_path(argv[1:]) if config.get("fast", True) else None
        if fast is not None:
            _run_python(*fast)
        argv[0] = config.get("python") or argv[0]
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores both; a fresh program gets the defaults
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(2, f"sandbox: cannot execute {argv[0]!r}: {exc.strerror}\n".encode())
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


# --------------------------------------------------------------------------------------- warm Python
def python_fast_path(args: list[str]) -> tuple[str, str, list[str]] | None:
    """(mode, target, argv) when `python ARGS` can run in this warm interpreter; None: exec a fresh one."""
    if len(args) >= 2 and args[0] in ("-c", "-m"):
        return args[0], args[1], args[2:]
    if args and not args[0].startswith("-"):
        return "script", args[0], args[1:]
    return None


def _run_python(mode: str, target: str, args: list[str]) -> None:
    """Run code as `python -c/-m/script` would, in this forked interpreter; exit with its status."""
    code = 0
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    try:
        if mode == "-c":
            sys.argv = ["-c", *args]
            sys.path[:] = ["", *BASE_PATH]
            # running the program is the point
            exec(compile(target, "<string>", "exec"), main.__dict__)  # noqa: S102
        elif mode == "-m":
            sys.argv = [target, *args]
            sys.path[:] = [os.getcwd(), *BASE_PATH]
            runpy._run_module_as_main(target)  # type: ignore[attr-defined]  # exactly what `python -m` calls
        else:
            sys.argv = [target, *args]
            sys.path[:] = [os.path.dirname(os.path.abspath(target)), *BASE_PATH]
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # noqa: BLE001
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        code = code or 1
    os._exit(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


# ------------------------------------------------------------------------------------------- the zygote
def _warm_up(modules: list[str]) -> None:
    """Import what jobs will need and run pytest once, so that forked jobs start hot."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S110
            pass
    if "pytest" in sys.modules:
        d = "/tmp/rlvr-warm"
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "test_warm.py"), "w") as f:
            f.write("import pytest\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_a(x, tmp_path):\n"
                    "    assert x\n\ndef test_b():\n    assert 1\n")
        try:
            sys.modules["pytest"].main(["-q", "-p", "no:cacheprovider", d])
        except BaseException:  # noqa: BLE001, S110
            pass


def main() -> None:
    config = json.loads(sys.argv[1])
    BASE_PATH[:] = sys.path[1:]  # without this script's directory; each job puts its own first
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    lean_fd = config.get("lean_fd")
    lean_pid = 0
    if lean_fd is not None:
        lean_pid = _fork_lean(config, in_fd, lean_fd, out_fd)
    _warm_up(config.get("warm", []))
    sys.stdout.flush()
    _settle(config)
    wire.send_frame(out_fd, {"ready": True})
    _serve(config, in_fd, out_fd, os.pidfd_open(lean_pid) if lean_pid else -1)


def _fork_lean(config: dict, in_fd: int, lean_fd: int, out_fd: int) -> int:
    """Start the lean template: a second zygote, forked before the warm-up, that serves the jobs sent on
    `lean_fd`. Forking a process and tearing it down costs in proportion to its memory, and most jobs
    (`python -c`, shell commands) gain nothing from an interpreter that has imported pytest: their chains
    are forked from this one, a third of the size. Both zygotes answer on the same pipe; the host sends a
    worker one job at a time, so their frames never interleave. Returns the lean zygote's PID."""
    pid = os.fork()
    if pid:
        os.close(lean_fd)
        return pid
    try:
        wire.prctl(wire.PR_SET_PDEATHSIG, signal.SIGKILL)  # the warm zygote's end is the worker's end
        os.close(in_fd)
        _settle(config)
    except BaseException:  # noqa: BLE001
        os._exit(5)
    _serve(config, lean_fd, out_fd, -1)
    os._exit(0)


def _settle(config: dict) -> None:
    """Freeze the template's heap and join the worker's cgroups, once, before serving."""
    import gc

    gc.collect()
    gc.freeze()  # forked chains then share the warm heap instead of touching every page
    # Before joining the cgroups, so that the copies are charged to the parent, not to every job's limit.
    wire.collapse_huge_pages()
    for procs in config.get("zygote_procs", []):
        with open(procs, "w") as f:  # joined once: a job then inherits the cgroup instead of migrating
            f.write("0")


def _serve(config: dict, in_fd: int, out_fd: int, partner_fd: int) -> None:
    """Keep CHAINS_AHEAD chains prepared; run each request on the oldest, answer, prepare more when idle.

    A D takes 2-3 ms to set itself up (namespaces, loopback, mounts, confinement), longer than the gap
    between two jobs of a busy template; with two chains ahead the next job finds one ready, and a
    request already waiting is served before any preparation. `partner_fd` (a pidfd, or -1) is the lean
    zygote, watched by the warm one: if either template dies, the whole worker ends, and the host
    replaces it.
    """
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    own_mnt_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    watch = [partner_fd] if partner_fd >= 0 else []
    chains: list[Chain] = []
    failures = 0
    while True:
        waits = [in_fd, *watch, *(c.d_pidfd for c in chains)]
        ready = select.select(waits, [], [], 0 if len(chains) < CHAINS_AHEAD else None)[0]
        if partner_fd >= 0 and partner_fd in ready:
            os._exit(5)
        for lost in [c for c in chains if c.d_pidfd in ready]:  # a waiting D died before any job
            chains.remove(lost)
            dispose(lost)
            failures = _failed(failures)
        if in_fd in ready and chains:
            try:
                header, blobs = wire.recv_frame(in_fd)
            except EOFError:
                for c in chains:
                    dispose(c)
                os._exit(0)  # the host closed the pipe: the worker shuts down
            reply, out, used = _run_on_chains(config, Job(header, blobs[0] if blobs else b""), chains.pop(0),
                                              chains, own_pid_ns, own_mnt_ns)
            if "error" not in reply:
                failures = 0
            wire.send_frame(out_fd, reply, *out)
            if used is not None:
                dispose(used)  # what is left (descriptors, an empty namespace) goes after the answer
        elif len(chains) < CHAINS_AHEAD:
            try:
                chains.append(prepare(config, own_pid_ns))
            except OSError:
                failures = _failed(failures)


def _run_on_chains(config: dict, job: Job, chain: Chain, chains: list[Chain], own_pid_ns: int,
                   own_mnt_ns: int) -> tuple[dict, list[bytes], Chain | None]:
    """Run a job; where its D turns out dead before the program started, again on the next chain (up to
    CHAIN_ATTEMPTS). Any other failure, or the last loss, is answered as an error frame (an
    infrastructure fault). Returns (reply, blobs, the chain still to dispose, if any)."""
    for attempt in range(1, CHAIN_ATTEMPTS + 1):
        try:
            reply, out = run_job(chain, job, own_mnt_ns)
            return reply, out, chain
        except ChainLost as exc:
            error = f"job process lost: {exc}"
            retry = True
        except BaseException as exc:  # noqa: BLE001 — an infrastructure fault, never the program's
            error, retry = f"job supervisor failed: {type(exc).__name__}: {exc}"[:400], False
        dispose(chain)  # before answering or retrying: no job meets anything of this one
        if not retry or attempt == CHAIN_ATTEMPTS:
            break
        next_chain = chains.pop(0) if chains else _prepare_or_none(config, own_pid_ns)
        if next_chain is None:
            break
        chain = next_chain
    return {"error": error}, [b"", b"", b""], None


def _prepare_or_none(config: dict, own_pid_ns: int) -> Chain | None:
    try:
        return prepare(config, own_pid_ns)
    except OSError:
        return None


def _failed(failures: int) -> int:
    """Count a chain that could not start; after too many in a row the worker ends and is replaced."""
    failures += 1
    if failures > 200:
        os._exit(5)
    time.sleep(min(0.005 * failures, 0.1))
    return failures


if __name__ == "__main__":
    main()
