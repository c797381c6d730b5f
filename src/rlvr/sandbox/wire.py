"""Stdlib-only pieces shared by the host pool and the in-sandbox zygote: framing, kernel calls, workspace copies.

Wire format (both directions): 4-byte big-endian header length, JSON header, then the raw blobs whose sizes
the header lists under "blobs".
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import struct
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same number on every architecture (Linux 5.2+)
OPEN_TREE_CLONE, AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, 4
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
_HDR = struct.Struct(">I")
libc = ctypes.CDLL(None, use_errno=True)


# ------------------------------------------------------------------------------------------------ wire
def send_frame(fd: int, header: dict, *blobs: bytes) -> None:
    """Write one frame: header JSON (with blob sizes) and blobs, looping over partial writes."""
    header = dict(header, blobs=[len(b) for b in blobs])
    raw = json.dumps(header).encode()
    data = b"".join([_HDR.pack(len(raw)), raw, *blobs])
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
    (size,) = _HDR.unpack(read_exact(fd, _HDR.size, deadline))
    if size > 1 << 24:
        raise ValueError("oversized frame header")
    header = json.loads(read_exact(fd, size, deadline))
    blobs = [read_exact(fd, int(n), deadline) for n in header.get("blobs", [])]
    return header, blobs


# ----------------------------------------------------------------------------------------- kernel calls
def check_rc(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    check_rc(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def umount(target: str) -> None:
    check_rc(libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def clone_tree(path: str) -> int:
    """A detached copy of the mount at `path` (open_tree OPEN_TREE_CLONE), as an fd; -1 where unsupported."""
    fd = libc.syscall(SYS_OPEN_TREE, -100, path.encode(), OPEN_TREE_CLONE | os.O_CLOEXEC)  # -100: AT_FDCWD
    return fd if fd >= 0 else -1


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


def prctl(option: int, value: int) -> None:
    check_rc(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), "prctl")


# --------------------------------------------------------------------------------------- workspace copy
def copy_in(src: str, dst: str, uid: int, gid: int) -> None:
    """Trusted lease directory -> job tmpfs. Symlinks are recreated, never followed."""
    stack = [(src, dst)]
    while stack:
        s_dir, d_dir = stack.pop()
        for entry in os.scandir(s_dir):
            target = os.path.join(d_dir, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target, 0o755)
                stack.append((entry.path, target))
            elif entry.is_file(follow_symlinks=False):
                _copy_file(entry.path, target, entry.stat(follow_symlinks=False).st_mode)
            else:
                continue
            os.chown(target, uid, gid, follow_symlinks=False)


def _copy_file(src: str, dst: str, mode: int, dst_dir_fd: int | None = None, budget: int | None = None) -> int:
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700 & mode | 0o644,
                       dir_fd=dst_dir_fd)
        total = 0
        try:
            while True:
                want = 1 << 20 if budget is None else min(1 << 20, budget - total)
                if want <= 0:
                    break
                n = os.sendfile(fout, fin, None, want)
                if n == 0:
                    break
                total += n
        finally:
            os.close(fout)
        return total
    finally:
        os.close(fin)


def copy_out(src: str, parent_fd: int, name: str, budget: int) -> tuple[bool, int]:
    """Job tmpfs (untrusted, but no job process is alive) -> `name` under parent_fd.

    Returns (complete, largest file size); complete is False when the byte budget ran out.
    """
    os.mkdir(name, 0o755, dir_fd=parent_fd)
    root_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    fds = [root_fd]
    stack = [(src, root_fd)]
    left = budget
    largest = 0
    try:
        while stack:
            s_dir, d_fd = stack.pop()
            for entry in os.scandir(s_dir):
                if entry.is_symlink():
                    os.symlink(os.readlink(entry.path), entry.name, dir_fd=d_fd)
                elif entry.is_dir(follow_symlinks=False):
                    os.mkdir(entry.name, 0o755, dir_fd=d_fd)
                    sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=d_fd)
                    fds.append(sub)
                    stack.append((entry.path, sub))
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    largest = max(largest, st.st_size)
                    left -= _copy_file(entry.path, entry.name, st.st_mode, dst_dir_fd=d_fd, budget=max(left, 0))
                    if left <= 0 and st.st_size > 0:
                        return False, largest
        return True, largest
    finally:
        for fd in fds:
            os.close(fd)


def rmtree_at(parent_fd: int, name: str) -> None:
    """Remove a directory tree relative to a directory fd, never following symlinks."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    try:
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                rmtree_at(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


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
    """Size of the biggest regular file under root (symlinks not followed)."""
    largest, stack = 0, [root]
    while stack:
        for entry in os.scandir(stack.pop()):
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                largest = max(largest, entry.stat(follow_symlinks=False).st_size)
    return largest


def nearly_full(path: str) -> bool:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize < 64 * 1024 or st.f_favail == 0


def set_rlimits(lim: dict) -> None:
    import resource

    cpu = int(lim.get("cpu_s") or lim["timeout_s"]) + 1
    table = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_FSIZE: (lim["file_size_mb"] << 20,) * 2,
        resource.RLIMIT_NOFILE: (lim["open_files"],) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    for res, value in table.items():
        resource.setrlimit(res, value)
