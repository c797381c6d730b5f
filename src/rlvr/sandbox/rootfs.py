"""Reading and preparing an unpacked image root on the host, as root, without ever leaving it.

An image is untrusted data: its `/etc` may be a symlink to the host's `/etc`, its `python3` a link to
`/../../x`. Everything here resolves paths inside the root the way the kernel would inside the jail (an
absolute link target starts again at the image's root, `..` stops there), and writes only through directory
descriptors opened with O_NOFOLLOW, so nothing an image holds can make rlvr read or write a host file.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from rlvr.sandbox.container import SANDBOX_UID, SLIRP_DNS

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""PATH where the image sets none (Docker's default)."""
MIN_PYTHON = (3, 9)
"""The oldest interpreter the zygote runs on (os.pidfd_open, os.waitstatus_to_exitcode)."""
ZYGOTE_MODULES = ("os.py", "json/__init__.py", "ctypes/__init__.py", "runpy.py", "struct.py")
"""Standard-library files the zygote needs: an interpreter without them (Debian's python3-minimal has no
ctypes) serves no warm jobs."""
UNSAFE_WORKDIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                   "/run", "/sbin", "/sys", "/tmp", "/usr", "/var", "/opt", "/opt/rlvr", "/.rlvr")
"""WORKDIRs the workspace is never mounted over (it would hide the system); under /proc, /dev, /sys, /tmp,
/.rlvr or /opt/rlvr neither."""
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_VERSIONED = re.compile(r"^python(\d)\.(\d+)$")


class RootfsError(ValueError):
    """The image's layout leaves rlvr no safe place for one of its mount points."""


def resolve_in(rootfs: Path, path: str, hops: int = 40) -> str | None:
    """`path` (absolute, inside the image) with every symlink followed as the jail would: the real in-image
    path, or None when it does not exist or the links loop."""
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        host = rootfs.joinpath(*done, part)
        try:
            st = os.lstat(host)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            hops -= 1
            if hops < 0:
                return None
            target = os.readlink(host)
            parts = [p for p in target.split("/") if p] + parts
            if target.startswith("/"):
                done = []
            continue
        done.append(part)
    return "/" + "/".join(done)


def host_path(rootfs: Path, path: str) -> Path | None:
    """The host path of an in-image path after its links are followed (None when missing)."""
    real = resolve_in(rootfs, path)
    return None if real is None else rootfs.joinpath(*[p for p in real.split("/") if p])


def read_text(rootfs: Path, path: str) -> str | None:
    """An in-image text file, links followed inside the image (None when it is missing or not a file)."""
    host = host_path(rootfs, path)
    if host is None or not host.is_file() or host.is_symlink():
        return None
    return host.read_text(errors="replace")


def _open_dir(rootfs: Path, rel: str, create: bool) -> int:
    """A descriptor of the in-image directory `rel`, opened component by component, never through a link."""
    fd = os.open(rootfs, _NOFOLLOW_DIR)
    try:
        for part in [p for p in rel.split("/") if p]:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nxt = os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
            except OSError as exc:
                raise RootfsError(f"the image's {rel} is not a plain directory ({exc.strerror})") from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_dir(rootfs: Path, path: str) -> None:
    """Make the in-image directory `path` (and its parents) a mount point; links in the way are an error."""
    os.close(_open_dir(rootfs, path, create=True))


def ensure_file(rootfs: Path, path: str) -> None:
    """Make the in-image file `path` a mount point: created empty when missing, a link there replaced."""
    parent, name = path.rsplit("/", 1)
    fd = _open_dir(rootfs, parent, create=True)
    try:
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            os.unlink(name, dir_fd=fd)
            st = None
        if st is None:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd))
        elif not stat.S_ISREG(st.st_mode):
            raise RootfsError(f"the image's {path} is not a regular file")
    finally:
        os.close(fd)


def workdir_of(workdir: str | None) -> str:
    """Where a job's workspace is mounted: the image's WORKDIR when that is safe, else /workspace."""
    wd = os.path.normpath(workdir or "/")
    if not wd.startswith("/") or wd in UNSAFE_WORKDIRS:
        return "/workspace"
    if any(wd.startswith(p + "/") for p in ("/proc", "/dev", "/sys", "/tmp", "/.rlvr", "/opt/rlvr")):
        return "/workspace"
    return wd


def _table(text: str | None, fields: int) -> list[list[str]]:
    rows = []
    for line in (text or "").splitlines():
        row = line.split(":")
        if len(row) >= fields and not line.startswith("#"):
            rows.append(row)
    return rows


def lookup_user(rootfs: Path, spec: str | None) -> tuple[int, int, str]:
    """(uid, gid, name) a job runs as for the image's USER: root (or none) becomes the sandbox user, 65534;
    any other user keeps its uid and gid (no capability, no supplementary group). An unknown name raises
    RootfsError."""
    user, _, group = (spec or "").partition(":")
    passwd = _table(read_text(rootfs, "/etc/passwd"), 7)
    if not user:
        uid, gid, name = 0, 0, "root"
    elif user.isdigit():
        uid = int(user)
        row = next((r for r in passwd if r[2] == user), None)
        gid, name = (int(row[3]), row[0]) if row and row[3].isdigit() else (uid, f"u{uid}")
    else:
        row = next((r for r in passwd if r[0] == user and r[2].isdigit() and r[3].isdigit()), None)
        if row is None:
            raise RootfsError(f"the image's USER {user!r} is not in its /etc/passwd")
        uid, gid, name = int(row[2]), int(row[3]), user
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            groups = _table(read_text(rootfs, "/etc/group"), 3)
            grow = next((r for r in groups if r[0] == group and r[2].isdigit()), None)
            if grow is None:
                raise RootfsError(f"the image's USER group {group!r} is not in its /etc/group")
            gid = int(grow[2])
    if uid == 0 or uid >= 1 << 31:
        return SANDBOX_UID, SANDBOX_UID, "sandbox"
    return uid, (SANDBOX_UID if gid == 0 else gid), name


def synth_etc(rootfs: Path, out: Path, uid: int, gid: int, name: str) -> None:
    """The /etc files a worker binds over the image's: passwd and group with an entry for the job's user when
    the image lacks one, hosts (always: localhost and the sandbox's hostname), and resolv.conf for a job
    without network (empty) and with one (the user-mode network's DNS)."""
    out.mkdir(parents=True, exist_ok=True)
    passwd = (read_text(rootfs, "/etc/passwd") or "root:x:0:0:root:/root:/bin/sh\n").rstrip("\n") + "\n"
    if not any(r[2] == str(uid) for r in _table(passwd, 7)):
        login = name if not any(r[0] == name for r in _table(passwd, 7)) else "sandbox"
        passwd += f"{login}:x:{uid}:{gid}:{login}:/tmp:/bin/sh\n"
    group = (read_text(rootfs, "/etc/group") or "root:x:0:\n").rstrip("\n") + "\n"
    if not any(r[2] == str(gid) for r in _table(group, 3)):
        label = "sandbox" if not any(r[0] == "sandbox" for r in _table(group, 3)) else f"g{gid}"
        group += f"{label}:x:{gid}:\n"
    (out / "passwd").write_text(passwd)
    (out / "group").write_text(group)
    (out / "hosts").write_text("127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    (out / "resolv.conf").write_text("# no network in this sandbox\n")
    (out / "resolv-network.conf").write_text(f"nameserver {SLIRP_DNS}\n")
    (out / "empty").write_text("")  # masks an image's ld.so.preload from rlvr's own supervisor


def find_python(rootfs: Path, path_env: str | None) -> tuple[str, str] | None:
    """(path, "X.Y") of the image's Python that jobs named `python` get and the zygote can run on: the first
    `python3` or `python` on the image's PATH whose real file is a versioned CPython (3.9 or later) with the
    standard-library modules the zygote imports; None when there is none. The path is the one found on PATH,
    not its target, so a venv's interpreter keeps its site-packages."""
    for cmd in ("python3", "python"):
        for d in (path_env or DEFAULT_PATH).split(":"):
            if not d.startswith("/"):
                continue
            found = f"{d.rstrip('/')}/{cmd}"
            real = resolve_in(rootfs, found)
            host = host_path(rootfs, found)
            if real is None or host is None or not host.is_file() or not os.access(host, os.X_OK):
                continue
            m = _VERSIONED.match(real.rsplit("/", 1)[-1])
            if m is None or (int(m.group(1)), int(m.group(2))) < MIN_PYTHON:
                continue
            version = f"{m.group(1)}.{m.group(2)}"
            lib = f"{os.path.dirname(os.path.dirname(real))}/lib/python{version}"
            if all(host_path(rootfs, f"{lib}/{mod}") is not None for mod in ZYGOTE_MODULES):
                return found, version
    return None


def has_shell(rootfs: Path) -> bool:
    """Whether the image has an executable /bin/sh."""
    host = host_path(rootfs, "/bin/sh")
    return host is not None and host.is_file() and os.access(host, os.X_OK)
