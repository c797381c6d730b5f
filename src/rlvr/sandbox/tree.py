"""Workspace trees: a task state that text files alone cannot hold (permission bits, symlinks, empty
directories, a git repository's binary objects), carried as one text file, a base64 tar archive, at the
reserved path `TREE`.

    files = {TREE: pack([Member("run.sh", b"echo hi\\n", mode=0o755), Member("logs", kind="dir")])}

A task whose workspace holds `TREE` is a tree task: when a lease opens for it, the archive is unpacked in
the workspace by the lease's own `tar` (`restore`), so the agent sees the tree, never the archive; when its
episode ends, the workspace is packed again (`capture`) and the final state carries the new archive beside
the workspace's text files, which are there for people to read. A verifier of such a task unpacks the final
archive in its own fresh lease. A final state whose `TREE` someone wrote by hand is no more than a workspace
they could have made: it unpacks as the job's user, under the same jail, setuid bits and owners dropped.

The image of a tree task needs `sh`, `base64`, `tar` and `gzip` (every Debian image has them).
"""
from __future__ import annotations

import base64
import gzip
import io
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rlvr.errors import InfraError
from rlvr.sandbox.base import Sandbox

TREE = ".rlvr/tree.tgz.b64"
"""The reserved workspace path of a tree archive (the whole `.rlvr/` directory is the archive's)."""
MAX_UNPACKED = 256 << 20
"""Bytes `members` reads out of an archive at most (a gzip bomb is refused, not expanded)."""
MAX_MEMBERS = 100_000
"""Members `members` reads at most."""
UNPACK = f"base64 -d {TREE} | tar -xzpf - --no-same-owner --delay-directory-restore"
"""Unpack the archive over the workspace, the archive kept (tar keeps the modes for a file's owner)."""
RESTORE = f"{UNPACK} && rm -rf .rlvr"
"""Unpack the archive over the workspace, then drop it."""
CAPTURE = ("rm -rf .rlvr && mkdir .rlvr && tar --exclude=./.rlvr --sort=name --numeric-owner --owner=0 "
           f"--group=0 -cf - . | gzip -n | base64 -w0 > {TREE}")
"""Pack the whole workspace but the reserved directory (whatever a program left there is replaced)."""
TEXT_LIMIT = 256 << 10
"""Text files larger than this are left out of a captured state's readable copy (the archive has them)."""


@dataclass(frozen=True)
class Member:
    """One entry of a tree."""

    path: str
    """Relative POSIX path."""
    data: bytes = b""
    """A file's bytes."""
    mode: int = 0o644
    """Permission bits (0o755 is a usual directory's)."""
    kind: str = "file"
    """`file`, `dir` or `link`."""
    target: str = ""
    """A link's target."""
    mtime: int = 1_767_225_600
    """Modification time (seconds since the epoch; default 2026-01-01, so a packed task is byte-stable)."""


def pack(members: Iterable[Member]) -> str:
    """A deterministic base64 tar.gz of `members` (sorted by path; parents are not added implicitly)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w",
                                                                           format=tarfile.PAX_FORMAT) as tar:
        for m in sorted(members, key=lambda m: m.path):
            info = tarfile.TarInfo("./" + m.path.strip("/"))
            info.mode, info.mtime, info.uid, info.gid = m.mode, m.mtime, 0, 0
            if m.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif m.kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, m.target
                tar.addfile(info)
            else:
                info.size = len(m.data)
                tar.addfile(info, io.BytesIO(m.data))
    return base64.b64encode(buf.getvalue()).decode("ascii")


def members(text: str) -> dict[str, Member]:
    """The entries of an archive by path, read in memory (never extracted); ValueError for an archive that is
    not one, or that unpacks beyond MAX_UNPACKED bytes or MAX_MEMBERS entries."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"the tree archive is not base64: {exc}") from None
    out: dict[str, Member] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
            for info in tar:
                if len(out) >= MAX_MEMBERS or total + info.size > MAX_UNPACKED:
                    raise ValueError("the tree archive unpacks beyond its limits")
                path = info.name.removeprefix("./").strip("/")
                if not path or path == ".":
                    continue
                mode = info.mode & 0o7777
                if info.isdir():
                    out[path] = Member(path, mode=mode, kind="dir", mtime=int(info.mtime))
                elif info.issym():
                    out[path] = Member(path, mode=mode, kind="link", target=info.linkname,
                                       mtime=int(info.mtime))
                elif info.isfile():
                    fh = tar.extractfile(info)
                    data = fh.read() if fh is not None else b""
                    total += len(data)
                    out[path] = Member(path, data, mode, mtime=int(info.mtime))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ValueError(f"the tree archive does not unpack: {exc}") from None
    return out


def has_tree(files: Mapping[str, object]) -> bool:
    """Whether a workspace (or a final state's files) carries a tree archive."""
    return TREE in files


def restore(sandbox: Sandbox) -> None:
    """Unpack a lease's tree archive in place; InfraError when the lease cannot (the task's image lacks the
    tools, or the archive is broken: the task's fault, never the agent's)."""
    res = sandbox.run(["sh", "-c", RESTORE])
    if res.exit_code != 0:
        raise InfraError(f"the task's tree archive did not unpack in its sandbox ({res.status.value}): "
                         f"{(res.stderr or res.error or '').strip()[-300:]}")


def capture(sandbox: Sandbox) -> dict[str, str]:
    """A lease's final state as files: the tree archive at `TREE`, and beside it the workspace's text files
    (those under `.git/`, binary ones and large ones left out) for people to read. InfraError when it cannot
    be packed."""
    res = sandbox.run(["sh", "-c", CAPTURE])
    if res.exit_code != 0:
        raise InfraError(f"the workspace could not be packed ({res.status.value}): "
                         f"{(res.stderr or res.error or '').strip()[-300:]}")
    return packed(sandbox.read_files(None))


def packed(files: Mapping[str, str]) -> dict[str, str]:
    """The files of a workspace just packed by CAPTURE as a final state: the archive, and the text files
    a reader is shown beside it. InfraError when the archive is missing."""
    archive = files.get(TREE)
    if not archive:
        raise InfraError("the workspace was packed but its archive is missing")
    shown = {p: t for p, t in files.items()
             if not p.startswith((".rlvr/", ".git/")) and "/.git/" not in p and "\ufffd" not in t
             and len(t) <= TEXT_LIMIT}
    return {**shown, TREE: archive}


def readable(files: Mapping[str, str]) -> dict[str, str]:
    """A tree task's files as text for a reader: the archive's text files when there is one, else the
    files."""
    if not has_tree(files):
        return dict(files)
    try:
        found = members(str(files[TREE]))
    except ValueError:
        return {p: t for p, t in files.items() if p != TREE}
    out: dict[str, str] = {}
    for path, m in found.items():
        if m.kind == "file" and not path.startswith(".git/"):
            try:
                out[path] = m.data.decode("utf-8")
            except UnicodeDecodeError:
                continue
    return out
