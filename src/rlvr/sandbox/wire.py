"""Stdlib-only pieces shared by the host pool and the in-sandbox zygote: framing, kernel calls, workspace
copies.

Wire format (both directions): two 4-byte big-endian lengths (the JSON header's, the blobs' together), the
JSON header, then the raw blobs whose sizes the header lists under "blobs". With both lengths up front a
reader takes a whole frame in one read once the prefix is in: a job's result is one wake-up, not five.

Over 500 lines on purpose: the zygote runs inside the sandbox with only the standard library and this file
beside it, so everything both sides share (framing, clone/setns/mount calls, workspace copies) must live in
one stdlib-only module that is copied in whole.
"""
from __future__ import annotations

import _socket  # not `socket`: this module is imported by the lean template, whose size every job pays for
import ctypes
import json
import os
import resource
import select
import signal
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing would cost the lean template a megabyte of heap
    from collections.abc import Callable
    from typing import Any

CLONE_FS = 0x00000200
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same number on every architecture (Linux 5.2+)
OPEN_TREE_CLONE, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, 4
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
_HDR = struct.Struct(">II")
libc = ctypes.CDLL(None, use_errno=True)


# ------------------------------------------------------------------------------------------------ wire
def socketpair() -> tuple[_socket.socket, _socket.socket]:
    """A connected pair of Unix datagram-boundary sockets (SOCK_SEQPACKET), close-on-exec."""
    return _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)


def send_fds(sock: _socket.socket, data: bytes, fds: list[int]) -> None:
    """Send `data` with open descriptors attached (SCM_RIGHTS): the receiver gets its own copies."""
    sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])


def recv_nowait(sock: _socket.socket, size: int) -> bytes | None:
    """One message if one is waiting; None if none is (or the socket failed), b"" at end of stream."""
    try:
        return sock.recv(size, _socket.MSG_DONTWAIT)
    except OSError:
        return None


def recv_fds(sock: _socket.socket, size: int, max_fds: int) -> tuple[bytes, list[int]]:
    """Receive one message and the descriptors attached to it (close-on-exec)."""
    msg, ancdata, _, _ = sock.recvmsg(size, _socket.CMSG_SPACE(max_fds * 4), _socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4])
    return msg, fds


def send_frame(fd: int, header: dict, *blobs: bytes) -> None:
    """Write one frame: header JSON (with blob sizes) and blobs, looping over partial writes."""
    sizes = [len(b) for b in blobs]
    raw = json.dumps(dict(header, blobs=sizes)).encode()
    data = b"".join([_HDR.pack(len(raw), sum(sizes)), raw, *blobs])
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int, deadline: float | None = None) -> bytes:
    """Read exactly n bytes; EOFError on end of stream, TimeoutError past the deadline."""
    parts: list[bytes] = []
    while n > 0:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer from the sandbox worker")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("sandbox worker closed its pipe")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def recv_frame(fd: int, deadline: float | None = None) -> tuple[dict, list[bytes]]:
    """Read one frame: (header, blobs). EOFError, TimeoutError as read_exact; ValueError on a malformed
    one."""
    size, total = _HDR.unpack(read_exact(fd, _HDR.size, deadline))
    if size > 1 << 24:
        raise ValueError("oversized frame header")
    body = memoryview(read_exact(fd, size + total, deadline))
    header = json.loads(body[:size].tobytes())
    sizes = [int(n) for n in header.get("blobs", [])]
    if sum(sizes) != total or min(sizes, default=0) < 0:
        raise ValueError("frame blob sizes do not add up")
    blobs, at = [], size
    for n in sizes:
        blobs.append(body[at:at + n].tobytes())
        at += n
    return header, blobs


# ----------------------------------------------------------------------------------------- kernel calls
def check_rc(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    check_rc(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
             f"mount {target}")


def umount(target: str) -> None:
    check_rc(libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def clone_tree(path: str) -> int:
    """A detached copy of the tree at `path`, submounts included (open_tree OPEN_TREE_CLONE, Linux 5.2+)."""
    flags = OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC
    fd = libc.syscall(SYS_OPEN_TREE, -100, path.encode(), flags)  # -100: AT_FDCWD
    check_rc(0 if fd >= 0 else -1, f"open_tree {path}")
    return fd


def attach_tree(tree_fd: int, target: str) -> None:
    """Mount a detached tree from `clone_tree` at `target` (move_mount)."""
    check_rc(libc.syscall(SYS_MOVE_MOUNT, tree_fd, b"", -100, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
             f"move_mount {target}")


MADV_COLLAPSE = 25
HUGE_PAGE = 1 << 21


def collapse_huge_pages() -> int:
    """Back the aligned 2 MiB stretches of this process's heap with huge pages (MADV_COLLAPSE, Linux 6.1+).

    Every fork copies, and every exit tears down, one page-table entry per resident 4 KiB page of the warm
    heap, twice per job; a huge page is one entry. Children still copy on write 4 KiB at a time. The
    collapse ignores the system's THP mode and leaves the mappings' flags alone, so later allocations get
    small pages as usual. Returns the bytes collapsed (0 where unsupported).
    """
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    try:
        with open("/proc/self/maps") as maps:
            regions = [line.split() for line in maps]
    except OSError:  # no /proc: an optimisation only
        return 0
    for fields in regions:
        if "rw" not in fields[1] or (len(fields) > 5 and fields[5] != "[heap]"):
            continue  # only anonymous, writable memory: the interpreter's heap and arenas
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        start, end = (lo + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), hi & ~(HUGE_PAGE - 1)
        if end > start and madvise(start, end - start, MADV_COLLAPSE) == 0:
            done += end - start
    return done


CLONE_VM, CLONE_FILES = 0x100, 0x400
WAITER_STACK = 1 << 14
_clone = libc.clone  # int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
_clone.restype = ctypes.c_int
_clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_PAUSE = ctypes.cast(libc.pause, ctypes.c_void_p)


def waiter_stack() -> ctypes.Array:
    """A stack for `spawn_waiter`: keep it referenced until the waiter is reaped."""
    return ctypes.create_string_buffer(WAITER_STACK)


def spawn_waiter(stack: ctypes.Array) -> int:
    """Start a child task that only waits in pause() until it is killed; returns its PID.

    It shares this process's memory and descriptor table (clone with CLONE_VM | CLONE_FILES), so starting it
    copies no page tables and execs nothing, and it holds no descriptor of its own that could keep a pipe
    open. It runs on `stack`, starts with every blockable signal blocked, so no handler of this process
    ever runs in it, and dies only by SIGKILL. As the first child after unshare(CLONE_NEWPID) it is the
    namespace's init: killing it kills the namespace.
    """
    top = (ctypes.addressof(stack) + len(stack) - 64) & ~15
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = _clone(_PAUSE, top, CLONE_VM | CLONE_FILES | signal.SIGCHLD, None)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    check_rc(0 if pid > 0 else -1, "clone")
    return pid


def loopback_up() -> None:
    """Bring up `lo` in this (fresh) network namespace: SIOCSIFFLAGS with IFF_UP | IFF_LOOPBACK |
    IFF_RUNNING."""
    fd = libc.socket(2, 2 | 0o2000000, 0)  # AF_INET, SOCK_DGRAM | SOCK_CLOEXEC
    check_rc(0 if fd >= 0 else -1, "socket")
    try:
        ifr = ctypes.create_string_buffer(struct.pack("16sH", b"lo", 0x1 | 0x8 | 0x40), 40)
        check_rc(libc.ioctl(fd, ctypes.c_ulong(0x8914), ifr), "ioctl SIOCSIFFLAGS lo")
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------- seccomp
SECCOMP_DENIED_X86_64 = {
    272: "unshare", 308: "setns", 155: "pivot_root", 165: "mount", 166: "umount2", 428: "open_tree",
    429: "move_mount", 430: "fsopen", 431: "fsconfig", 432: "fsmount", 433: "fspick", 442: "mount_setattr",
    425: "io_uring_setup", 426: "io_uring_enter", 427: "io_uring_register", 323: "userfaultfd", 321: "bpf",
    298: "perf_event_open", 248: "add_key", 249: "request_key", 250: "keyctl", 246: "kexec_load",
    320: "kexec_file_load", 175: "init_module", 313: "finit_module", 176: "delete_module", 167: "swapon",
    168: "swapoff", 169: "reboot", 134: "uselib", 163: "acct", 139: "sysfs", 212: "lookup_dcookie",
}
"""Syscalls a program gets EPERM for: namespaces and mounts (with a user namespace an unprivileged program
would get them back inside it), and rarely needed kernel surface where exploits have clustered."""
_SYS_CLONE, _SYS_CLONE3, _CLONE_NEWUSER = 56, 435, 0x10000000
_AUDIT_ARCH_X86_64 = 0xC000003E
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_filter() -> bytes | None:
    """The classic-BPF program of the job's seccomp filter; None where it is not defined (not x86_64).

    Denied: the calls in SECCOMP_DENIED_X86_64, `clone` with CLONE_NEWUSER, and every call of another ABI
    (x32, i386). `clone3` gets ENOSYS, because its flags sit behind a pointer a filter cannot read; the C
    library then falls back to `clone` (threads and posix_spawn keep working).
    """
    if os.uname().machine != "x86_64":
        return None
    ld_w, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    deny, enosys, allow = _RET_ERRNO | _EPERM, _RET_ERRNO | _ENOSYS, _RET_ALLOW
    nrs = sorted(SECCOMP_DENIED_X86_64)
    prog = [_bpf(ld_w, 4), _bpf(jeq, _AUDIT_ARCH_X86_64, 1, 0), _bpf(ret, deny), _bpf(ld_w, 0),
            _bpf(jge, 0x40000000, 0, 1), _bpf(ret, deny)]  # x32 numbers
    prog += [_bpf(jeq, nr, 0, 1) + _bpf(ret, deny) for nr in nrs]
    prog += [_bpf(jeq, _SYS_CLONE3, 0, 1), _bpf(ret, enosys),
             _bpf(jeq, _SYS_CLONE, 0, 3), _bpf(ld_w, 16), _bpf(jset, _CLONE_NEWUSER, 0, 1), _bpf(ret, deny),
             _bpf(ret, allow)]
    return b"".join(prog)


def install_seccomp() -> bool:
    """Confine this process and its descendants with `seccomp_filter()` (needs no_new_privs set first).

    Returns False where no filter is defined for this architecture.
    """
    prog = seccomp_filter()
    if prog is None:
        return False
    buf = ctypes.create_string_buffer(prog, len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    check_rc(libc.prctl(22, 2, ctypes.byref(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return True


def prctl(option: int, value: int) -> None:
    check_rc(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), "prctl")


# --------------------------------------------------------------------------------------- workspace copy
def file_mode(mode: int) -> int:
    """The permission bits a copied file keeps: its own, without setuid, setgid or sticky, and always readable
    and writable by its owner (the job's user, and the pool that reads the workspace back)."""
    return mode & 0o777 | 0o600


def dir_mode(mode: int) -> int:
    """The permission bits a copied directory keeps: its own, always open to its owner."""
    return mode & 0o777 | 0o700


def _mkdir(name: str, mode: int, dir_fd: int | None = None) -> None:
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    os.chmod(name, dir_mode(mode), dir_fd=dir_fd)  # just made by this process: no link to follow


def copy_in(src: str, dst: str, uid: int, gid: int) -> None:
    """Trusted lease directory -> job tmpfs. Symlinks are recreated, never followed; permission bits are kept
    (`file_mode`, `dir_mode`), so a workspace keeps its modes from one job to the next."""
    stack = [(src, dst)]
    while stack:
        s_dir, d_dir = stack.pop()
        for entry in os.scandir(s_dir):
            target = os.path.join(d_dir, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                _mkdir(target, entry.stat(follow_symlinks=False).st_mode)
                stack.append((entry.path, target))
            elif entry.is_file(follow_symlinks=False):
                _copy_file(entry.path, target, entry.stat(follow_symlinks=False))
            else:
                continue
            os.chown(target, uid, gid, follow_symlinks=False)


def _copy_file(src: str, dst: str, st: os.stat_result, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None, budget: int | None = None) -> int:
    """Copy one regular file with its permission bits (`file_mode`) and its access and modification times, so
    that `make` in the next job sees which file is newer exactly as the last job left them."""
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=src_dir_fd)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dst_dir_fd)
        total = 0
        try:
            os.fchmod(fout, file_mode(st.st_mode))  # not the umask's: a job's chmod 600 or 640 stays
            while True:
                want = 1 << 20 if budget is None else min(1 << 20, budget - total)
                if want <= 0:
                    break
                n = os.sendfile(fout, fin, None, want)
                if n == 0:
                    break
                total += n
            os.utime(fout, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fout)
        return total
    finally:
        os.close(fin)


MAX_DEPTH = 128
"""Directory levels of a job's tmpfs that are copied back or inspected. A program can nest directories
until the path outgrows PATH_MAX or a recursive walk outgrows its stack; deeper entries are left out, and a
copy that leaves any out is reported incomplete."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _walk(root_fd: int, visit: Callable[[os.DirEntry, int, Any], Any],
          leave: Callable[[Any], None] = lambda state: None, max_depth: int = MAX_DEPTH) -> bool:
    """Depth-first walk below an open directory, through descriptors only (no path ever grows long, and
    no Python recursion).

    `visit(entry, dir_fd, state)` is called for every entry with the state of the directory it is in
    (None at the top). For a directory it returns the state of that directory's own walk, or None to skip
    it; `leave(state)` is called when that walk ends. Returns False when directories below `max_depth`
    were left out. Holds one descriptor per level, besides what the states hold.
    """
    complete = True
    with os.scandir(root_fd) as it:
        stack: list[tuple[list[os.DirEntry], int, Any]] = [(list(it), root_fd, None)]
    while stack:
        entries, dir_fd, state = stack[-1]
        if not entries:
            stack.pop()
            if stack:  # not the top: close what this level opened
                os.close(dir_fd)
                leave(state)
            continue
        entry = entries.pop()
        if not entry.is_dir(follow_symlinks=False):
            visit(entry, dir_fd, state)
            continue
        if len(stack) > max_depth:
            complete = False
            continue
        child = visit(entry, dir_fd, state)
        if child is None:
            continue
        sub = os.open(entry.name, _DIR, dir_fd=dir_fd)
        with os.scandir(sub) as it:
            stack.append((list(it), sub, child))
    return complete


def copy_out(src: str, parent_fd: int, name: str, budget: int) -> tuple[bool, int]:
    """Job tmpfs (untrusted, but no job process is alive) -> `name` under parent_fd.

    Regular files, directories and symlinks are copied (links recreated, never followed, permission bits kept
    as `file_mode` and `dir_mode` say); FIFOs, sockets and devices are dropped. Returns (complete, largest
    file size); complete is False when the byte budget ran out or the tree was deeper than MAX_DEPTH.
    """
    os.mkdir(name, 0o755, dir_fd=parent_fd)
    dst_root = os.open(name, _DIR, dir_fd=parent_fd)
    src_root = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    left, largest = budget, 0
    out_of_budget = False

    def visit(entry: os.DirEntry, src_dir: int, dst_dir: int | None) -> int | None:
        nonlocal left, largest, out_of_budget
        d_fd = dst_root if dst_dir is None else dst_dir
        if out_of_budget:
            return None
        if entry.is_symlink():
            os.symlink(os.readlink(entry.name, dir_fd=src_dir), entry.name, dir_fd=d_fd)
        elif entry.is_dir(follow_symlinks=False):
            _mkdir(entry.name, entry.stat(follow_symlinks=False).st_mode, dir_fd=d_fd)
            return os.open(entry.name, _DIR, dir_fd=d_fd)
        elif entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            largest = max(largest, st.st_size)
            left -= _copy_file(entry.name, entry.name, st, src_dir_fd=src_dir, dst_dir_fd=d_fd,
                               budget=max(left, 0))
            if left <= 0 and st.st_size > 0:
                out_of_budget = True
        return None

    try:
        complete = _walk(src_root, visit, os.close)
    finally:
        os.close(src_root)
        os.close(dst_root)
    return complete and not out_of_budget, largest


_FD_LEVELS = 64
"""Descriptors rmtree_at holds at most: deeper, it releases a level's and comes back to it through "..".
"""


def rmtree_at(parent_fd: int, name: str) -> None:
    """Remove a directory tree relative to a directory fd, never following symlinks: through descriptors
    (any path length, no Python recursion), at most _FD_LEVELS of them, each directory listed once."""
    try:
        top = os.open(name, _DIR, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    stack: list[list[Any]] = [[top, name, None]]  # per level: its fd (-1: released), name, subdirs left
    held = 1
    while stack:
        level = stack[-1]
        fd = level[0]
        if level[2] is None:  # first visit: remove everything but directories, remember those
            subdirs = []
            with os.scandir(fd) as it:
                entries = list(it)
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
            level[2] = subdirs
        if level[2]:
            sub = level[2].pop()
            child = os.open(sub, _DIR, dir_fd=fd)
            if held >= _FD_LEVELS:
                os.close(fd)
                level[0] = -1
                held -= 1
            stack.append([child, sub, None])
            held += 1
            continue
        stack.pop()
        if not stack:
            os.close(fd)
            os.rmdir(name, dir_fd=parent_fd)
            return
        up = stack[-1]
        if up[0] < 0:
            up[0] = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            held += 1
        os.close(fd)
        held -= 1
        os.rmdir(level[1], dir_fd=up[0])


# ------------------------------------------------------------------------------------------- limits
def tmpfs_sizes(workspace_mb: int, memory_mb: int) -> tuple[int, int, int]:
    """MiB of the /workspace, /tmp and /dev/shm tmpfs of a job.

    tmpfs pages are memory charged to the job's cgroup that killing a process does not free, so together
    they stay below the memory limit (with room for the supervisors): filling them ends in ENOSPC, never in
    an out-of-memory state that no kill can resolve. The workspace gets its full size when that fits.
    """
    room = max(memory_mb - 32, 6)
    ws = max(min(workspace_mb, room - 4), 2)
    rest = max(room - ws, 4)
    return ws, max(rest * 3 // 4, 2), max(rest // 4, 1)


def largest_file(root: str) -> int:
    """Size of the biggest regular file under root, down to MAX_DEPTH (symlinks not followed)."""
    largest = 0

    def visit(entry: os.DirEntry, _dir: int, _state: object) -> bool | None:
        nonlocal largest
        if entry.is_dir(follow_symlinks=False):
            return True  # walk into it
        if entry.is_file(follow_symlinks=False):
            largest = max(largest, entry.stat(follow_symlinks=False).st_size)
        return None

    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _walk(fd, visit)
    finally:
        os.close(fd)
    return largest


def nearly_full(path: str) -> bool:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize < 64 * 1024 or st.f_favail == 0


def set_rlimits(lim: dict) -> None:
    cpu = int(lim.get("cpu_s") or lim["timeout_s"]) + 1
    table = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_FSIZE: (lim["file_size_mb"] << 20,) * 2,
        resource.RLIMIT_NOFILE: (lim["open_files"],) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    for res, value in table.items():
        resource.setrlimit(res, value)
