"""The warm worker inside bubblewrap: keeps a confined process chain forked ahead of each job.

This file runs as a script inside the sandbox, so it imports only the standard library (and `wire.py` beside
it). A zygote forks per job a chain *before* the job arrives, so that no fork sits between a request and its
result:

- C, PID 1 of a fresh PID namespace and owner of fresh mount, IPC and network namespaces (tmpfs at
  /workspace, /tmp and /dev/shm, its own /proc, only a loopback device), the control directory already
  unmounted; it waits for a job on its template's request pipe. With a job it copies the lease's files in,
  binds read-only material, starts D, drains output with caps, enforces the wall-clock timeout, kills every
  process of its namespace (`kill(-1)` from PID 1), copies the workspace back (regular files, directories
  and symlinks, never following links) and writes one result frame to the host.
- D, forked by C in advance, drops to the unprivileged user with no_new_privs and a seccomp filter
  (`wire.seccomp_filter`), waits for the go, sets the job's rlimits and runs the command: `python
  -c/-m/script` in the already warm interpreter, anything else by exec; it ends with os._exit after
  flushing (never a full interpreter finalisation).

Each worker has two templates, each a zygote with its own chain waiting: the warm one (pytest imported and
run once) and a lean one forked before that warm-up, a third of its size, for jobs that do not need it
(see `_fork_lean`); the host picks one per job. While one chain runs a job, its zygote forks the next. A
chain that dies holding a job makes its zygote report an error frame, which the host treats as an
infrastructure fault.
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
EXIT_HOST_CLOSED = 9
"""A waiting chain's exit status when the host closed the pipe: the worker shuts down."""
BASE_PATH: list[str] = []
"""The interpreter's sys.path without its first entry, as a fresh `python` would have it."""


class Job:
    """One decoded job request (see BwrapPool.execute for the producer)."""

    def __init__(self, header: dict, stdin: bytes) -> None:
        self.argv: list[str] = header["argv"]
        self.lease: str = header["lease"]
        self.limits: dict = header["limits"]
        self.mounts: list[list[str]] = header.get("mounts", [])
        self.channel: bool = header.get("channel", False)
        self.env: dict[str, str] = header["env"]
        self.stdin = stdin


# ------------------------------------------------------------------------------------------------- C
class Chain:
    """State of C, the job's PID-1 supervisor, between set-up and result."""

    def __init__(self, config: dict, in_fd: int, out_fd: int, taken_w: int) -> None:
        self.config = config
        self.in_fd, self.out_fd, self.taken_w = in_fd, out_fd, taken_w
        self.sizes = wire.tmpfs_sizes(config["workspace_mb"], config["memory_mb"])
        self.pipes = {name: os.pipe() for name in ("in", "out", "err", "chan", "go")}
        self.leases_fd = -1
        self.tree_fd = -1  # detached copy of the leases mount, for binds (-1: no open_tree, /.rlvr stays)
        self.d_pid = 0


def chain_main(config: dict, in_fd: int, out_fd: int, taken_w: int) -> None:
    """C: set up, fork D, wait for a job, run it, report. Never returns."""
    try:
        wire.prctl(wire.PR_SET_PDEATHSIG, signal.SIGKILL)
        ch = Chain(config, in_fd, out_fd, taken_w)
        _chain_setup(ch)
        ch.d_pid = _fork_retry()
        if ch.d_pid == 0:
            _candidate_main(ch)
        for name, (r, w) in ch.pipes.items():  # keep only C's ends: EOFs must reach their readers
            os.close(w if name in ("out", "err", "chan") else r)
    except BaseException:  # noqa: BLE001
        os._exit(3)
    try:
        header, blobs = wire.recv_frame(in_fd)
    except EOFError:
        os._exit(EXIT_HOST_CLOSED)
    except BaseException:  # noqa: BLE001
        os._exit(3)
    os.write(taken_w, b"T")
    try:
        _chain_run(ch, Job(header, blobs[0] if blobs else b""))
    except BaseException as exc:  # noqa: BLE001 — the zygote answers for a chain that dies holding a job
        os.write(taken_w, f"E{type(exc).__name__}: {exc}"[:400].encode())
        os._exit(3)
    os._exit(0)


def _fork_retry() -> int:
    """fork, waiting out a full pids cgroup (a previous job's fork bomb is being killed)."""
    for _ in range(400):
        try:
            return os.fork()
        except BlockingIOError:
            time.sleep(0.005)
    return os.fork()


def _chain_setup(ch: Chain) -> None:
    os.setsid()
    # Fresh IPC and network namespaces too: System V shared memory, semaphores and message queues outlive
    # their creator, and so do TCP sockets in TIME_WAIT (a port the last job used stays taken for a minute):
    # in the worker's namespaces the next job would see them. A network namespace holds only a loopback
    # device, down until brought up; it is torn down by the kernel after the job, off the job's path.
    wire.check_rc(wire.libc.unshare(wire.CLONE_NEWNS | wire.CLONE_NEWIPC | wire.CLONE_NEWNET), "unshare")
    wire.loopback_up()
    wire.mount(None, "/", None, wire.MS_REC | wire.MS_PRIVATE)
    _mount_tmpfs(ch.config, ch.sizes, 0)
    wire.mount("proc", "/proc", "proc", wire.MS_NOSUID | wire.MS_NODEV | wire.MS_NOEXEC)
    for procs in ch.config["procs"]:
        with open(procs, "w") as f:
            f.write("0")
    leases = os.path.join(CONTROL_DIR, "leases")
    ch.leases_fd = os.open(leases, os.O_RDONLY | os.O_DIRECTORY)
    # Unmount the control directory now, while idle: an unmount waits for an RCU grace period, several
    # milliseconds on a loaded host, that would otherwise sit between a job's request and its start.
    # Workspace copies go through leases_fd; read-only binds need an attached source, so a detached copy
    # of the leases mount is kept and attached at job time only when a job has binds.
    ch.tree_fd = wire.clone_tree(leases)
    if ch.tree_fd >= 0:
        wire.umount(CONTROL_DIR)


def _mount_tmpfs(config: dict, sizes: tuple[int, int, int], extra: int) -> None:
    uid, gid, inodes = config["uid"], config["gid"], config["inodes"]
    opts = [f"mode=0755,uid={uid},gid={gid}", "mode=1777", "mode=1777"]
    flags = wire.MS_NOSUID | wire.MS_NODEV
    for target, size, opt, more in zip(TMPFS, sizes, opts, (0, 0, wire.MS_NOEXEC)):
        wire.mount("tmpfs", target, "tmpfs", flags | more | extra, f"size={size}m,nr_inodes={inodes},{opt}")


def _chain_run(ch: Chain, job: Job) -> None:
    lim = job.limits
    sizes = wire.tmpfs_sizes(lim["workspace_mb"], lim["memory_mb"])
    if sizes != ch.sizes:
        _mount_tmpfs(ch.config, sizes, wire.MS_REMOUNT)
    lease = f"/proc/self/fd/{ch.leases_fd}/{job.lease}"
    try:
        wire.copy_in(lease + "/ws", WORKSPACE, ch.config["uid"], ch.config["gid"])
    except OSError as exc:  # the caller's files exceed the workspace limit: the program never starts
        header = {"exit_code": None, "signal": None, "timed_out": False, "output_exceeded": False,
                  "stdout_total": 0, "stderr_total": 0, "workspace_full": True,
                  "spawn_error": f"the workspace does not fit its limits: {exc.strerror}"}
        wire.send_frame(ch.out_fd, header, b"", b"", b"")
        return
    if ch.tree_fd < 0:
        created = _bind_mounts(job, lease)
        wire.umount(CONTROL_DIR)  # the program never sees other leases, the cgroups or this worker's code
    elif job.mounts:
        wire.attach_tree(ch.tree_fd, CONTROL_DIR)
        created = _bind_mounts(job, f"{CONTROL_DIR}/{job.lease}")
        wire.umount(CONTROL_DIR)
    else:
        created = []
    spec = {"argv": job.argv, "limits": lim, "env": job.env, "channel": job.channel}
    t0 = time.monotonic()
    wire.send_frame(ch.pipes["go"][1], spec)
    os.close(ch.pipes["go"][1])
    header, blobs = _drain(ch, job, t0)
    for target, is_mount in reversed(created):
        if is_mount:
            wire.umount(target)
        else:
            os.rmdir(target)  # the worker's root is shared by its chains: leave no mount point behind
    header["workspace_full"] = any(wire.nearly_full(p) for p in TMPFS[:2])
    lease_fd = os.open(lease, os.O_RDONLY | os.O_DIRECTORY)
    os.rename("ws", "ws.old", src_dir_fd=lease_fd, dst_dir_fd=lease_fd)
    header["workspace_copied"], largest = wire.copy_out(WORKSPACE, lease_fd, "ws", lim["workspace_mb"] << 20)
    wire.rmtree_at(lease_fd, "ws.old")
    largest = max(largest, wire.largest_file("/tmp"), wire.largest_file("/dev/shm"))
    header["file_at_cap"] = largest >= lim["file_size_mb"] << 20
    wire.send_frame(ch.out_fd, header, *blobs)


def _drain(ch: Chain, job: Job, t0: float) -> tuple[dict, list[bytes]]:
    """Feed stdin, drain capped output, enforce the wall-clock limit, end the namespace. (header, blobs)."""
    cap = job.limits["output_bytes"]
    deadline = t0 + job.limits["timeout_s"]
    pidfd = os.pidfd_open(ch.d_pid)
    readers = {ch.pipes[n][0]: n for n in ("out", "err", "chan")}
    kept: dict[str, list[bytes]] = {n: [] for n in readers.values()}
    total = dict.fromkeys(readers.values(), 0)
    stdin_fd = ch.pipes["in"][1]
    pending = memoryview(job.stdin)
    if pending:
        os.set_blocking(stdin_fd, False)
    else:
        os.close(stdin_fd)
        stdin_fd = -1
    timed_out = exceeded = False
    d_status: int | None = None
    while readers or d_status is None:
        left = deadline - time.monotonic()
        if left <= 0 and d_status is None:
            timed_out = True
            _kill_all()
        waits = list(readers) + ([pidfd] if d_status is None else [])
        r, w, _ = select.select(waits, [stdin_fd] if stdin_fd >= 0 else [], [], max(left, 0.05))
        if w:
            try:
                pending = pending[os.write(stdin_fd, pending[: 1 << 16]):]
            except BlockingIOError:
                pass
            except BrokenPipeError:  # the program closed its stdin: the rest is dropped, like a shell would
                pending = pending[:0]
            if not pending:
                os.close(stdin_fd)
                stdin_fd = -1
        for fd in r:
            if fd == pidfd:
                d_status = os.waitpid(ch.d_pid, 0)[1]
                _kill_all()  # D is done: whatever it left running (daemons, pipes held open) dies now
                continue
            chunk = os.read(fd, 1 << 16)
            name = readers[fd]
            if not chunk:
                os.close(fd)
                del readers[fd]
                continue
            room = cap - total[name]
            if room > 0:
                kept[name].append(chunk[:room])
            total[name] += len(chunk)
            if total[name] > cap and name != "chan" and not exceeded:
                exceeded = True
                _kill_all()
    if stdin_fd >= 0:
        os.close(stdin_fd)
    os.close(pidfd)
    _reap_all()
    header = {
        "exit_code": os.waitstatus_to_exitcode(d_status) if os.WIFEXITED(d_status) else None,
        "signal": os.WTERMSIG(d_status) if os.WIFSIGNALED(d_status) else None,
        "timed_out": timed_out, "output_exceeded": exceeded,
        "stdout_total": total["out"], "stderr_total": total["err"], "run_s": time.monotonic() - t0,
    }
    return header, [b"".join(kept["out"]), b"".join(kept["err"]), b"".join(kept["chan"])]


def _kill_all() -> None:
    """From PID 1, kill(-1) reaches every other process of the job's namespace, detached ones included."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap_all() -> None:
    while True:
        _kill_all()
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


# ------------------------------------------------------------------------------------------------- D
def _candidate_main(ch: Chain) -> None:
    """D: confine itself, wait for the go, then become the program. Never returns.

    Everything that does not depend on the job (the unprivileged user, no_new_privs, stdio, cwd) is done
    while idle, before the go; only the job's rlimits, environment and descriptors are set after it.
    """
    try:
        for fd in (ch.in_fd, ch.out_fd, ch.taken_w, ch.leases_fd, ch.pipes["go"][1]):
            os.close(fd)
        go_r = ch.pipes["go"][0]
        _rehearse()
        p = ch.pipes
        os.dup2(p["in"][0], 0)
        os.dup2(p["out"][1], 1)
        os.dup2(p["err"][1], 2)
        os.chdir(WORKSPACE)
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
    except BaseException:  # noqa: BLE001  # before the go: C reports the lost chain as an infra fault
        os._exit(126)
    try:
        try:
            spec, _ = wire.recv_frame(go_r)
        except EOFError:
            os._exit(0)
        keep = 3
        if spec["channel"]:
            os.dup2(p["chan"][1], 3)
            keep = 4
        os.closerange(keep, 1 << 16)
        wire.set_rlimits(spec["limits"])  # only lowers limits: allowed without privileges
        os.environ.clear()
        os.environ.update(spec["env"])
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"sandbox: job set-up failed: {exc}\n".encode())
        os._exit(126)
    _become(spec["argv"], spec["env"], ch.config["python"])


def _rehearse() -> None:
    """Touch, while idle, the memory a job start will write (copy-on-write faults cost ~4 us a page, and
    ~800 of them would otherwise sit between the go and the program's first instruction)."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    exec(compile("import sys, os\nx = [i for i in range(10)]\n", "<string>", "exec"), main.__dict__)  # noqa: S102
    json.loads(json.dumps({"argv": ["python", "-c", "pass"], "limits": {"timeout_s": 1.0}, "env": dict(os.environ)}))
    env = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    sys.stdout.flush()
    sys.stderr.flush()


def _become(argv: list[str], env: dict[str, str], python: str) -> None:
    argv = list(argv)
    if argv[0] == "python":
        fast = python_fast_path(argv[1:])
        if fast is not None:
            _run_python(*fast)
        argv[0] = python
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores both; a fresh program gets the defaults
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(2, f"sandbox: cannot execute {argv[0]!r}: {exc.strerror}\n".encode())
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def _bind_mounts(job: Job, lease: str) -> list[tuple[str, bool]]:
    """Read-only binds of trusted material (relative to the lease dir) at absolute paths.

    Returns (path, is_mount) in creation order, so that the caller can undo it in reverse: the worker's
    root is shared by its jobs, and a later job must not even see an empty mount point of this one.
    """
    created: list[tuple[str, bool]] = []
    for rel, target in job.mounts:
        missing = []
        parent = target
        while not os.path.lexists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(missing):
            os.mkdir(d, 0o755)
            created.append((d, False))
        wire.mount(f"{lease}/{rel}", target, None, wire.MS_BIND | wire.MS_REC)
        wire.mount(None, target, None, wire.MS_REMOUNT | wire.MS_BIND | wire.MS_RDONLY | wire.MS_NOSUID | wire.MS_NODEV)
        created.append((target, True))
    return created


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
            exec(compile(target, "<string>", "exec"), main.__dict__)  # noqa: S102  # running the program is the point
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
    """Keep exactly one chain waiting for the next job; answer for chains that die holding one.

    `partner_fd` (a pidfd, or -1) is the lean zygote, watched by the warm one: if either template dies,
    the whole worker ends, and the host replaces it.
    """
    chains: dict[int, list] = {}  # taken pipe -> [pid, taken, error]
    waiting = False
    failures = 0
    own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    while True:
        if not waiting:
            try:
                # unshare(CLONE_NEWPID) only works while children would still be born into our own
                # namespace, so point that back first; then the next child is PID 1 of a fresh one.
                wire.check_rc(wire.libc.setns(own_pid_ns, wire.CLONE_NEWPID), "setns")
                wire.check_rc(wire.libc.unshare(wire.CLONE_NEWPID), "unshare")
                taken_r, taken_w = os.pipe()
                pid = os.fork()
            except OSError:
                failures += 1
                if failures > 400:
                    os._exit(5)  # cannot start chains at all: let the host replace this worker
                time.sleep(0.005)
                continue
            if pid == 0:
                os.close(taken_r)
                chain_main(config, in_fd, out_fd, taken_w)
            os.close(taken_w)
            chains[taken_r] = [pid, False, ""]
            waiting = True
        for fd in select.select(list(chains) + ([partner_fd] if partner_fd >= 0 else []), [], [])[0]:
            if fd == partner_fd:
                os._exit(5)
            data = os.read(fd, 512)
            entry = chains[fd]
            if data[:1] == b"T":
                entry[1], waiting, failures = True, False, 0
                data = data[1:]
            if data[:1] == b"E":
                entry[2] = data[1:].decode(errors="replace")
            if data:
                continue
            os.close(fd)
            del chains[fd]
            status = os.waitstatus_to_exitcode(os.waitpid(entry[0], 0)[1])
            if status == EXIT_HOST_CLOSED:
                os._exit(0)
            if entry[1] and status != 0:
                wire.send_frame(out_fd, {"error": f"job supervisor died ({status}) {entry[2]}".strip()}, b"", b"", b"")
            if not entry[1]:
                waiting = False
                failures += 1
                if failures > 20:
                    os._exit(5)  # chains cannot even start: let the host replace this worker
                time.sleep(0.01 * failures)


if __name__ == "__main__":
    main()
