"""Host-side access to lease workspaces that never follows a symlink the sandboxed program may have
planted."""
from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from rlvr import links
from rlvr.sandbox.base import FileMap, iter_safe_paths
from rlvr.sandbox.wire import rmtree_at

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _parent_fd(root: Path, rel: str, create: bool) -> tuple[int, str]:
    """Open the directory holding `rel` component by component with O_NOFOLLOW; return (fd, last name)."""
    parts = rel.split("/")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        raise ValueError(f"workspace path {rel!r} does not lead through plain directories "
                         f"({exc.strerror})") from None
    return fd, parts[-1]


def write_files(root: Path, files: FileMap) -> None:
    """Write files under root (parents created); a symlink or directory in the way is an error or replaced."""
    for rel, content in iter_safe_paths(files):
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        fd, name = _parent_fd(root, rel, create=True)
        try:
            try:
                if stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                    os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            try:
                out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=fd)
            except IsADirectoryError:
                raise ValueError(f"workspace path {rel!r} is a directory") from None
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
            finally:
                os.close(out)
        finally:
            os.close(fd)


def read_file(root: Path, rel: str) -> bytes | None:
    """The bytes of a regular file under root, or None (missing, a symlink, a directory, unsafe path)."""
    try:
        ((rel, _),) = iter_safe_paths({rel: ""})
        fd, name = _parent_fd(root, rel, create=False)
    except ValueError:
        return None
    try:
        f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(f).st_mode):
            return None
        with os.fdopen(f, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(f)


def list_files(root: Path) -> list[str]:
    """Relative paths of every regular file under root, sorted, without following symlinks."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            p = os.path.join(dirpath, name)
            if stat.S_ISREG(os.lstat(p).st_mode):
                found.append(Path(p).relative_to(root).as_posix())
    return sorted(found)


def read_files(root: Path, paths: Sequence[str] | None = None) -> dict[str, str]:
    """Read files back as text (UTF-8 with replacement); None: every regular file, and what each symbolic link
    that stays inside the workspace leads to, read at the link's path (`rlvr.links`: a link out of the
    workspace is never read). Missing ones are left out."""
    out: dict[str, str] = {}
    for rel in (list_files(root) if paths is None else paths):
        data = read_file(root, rel)
        if data is not None:
            out[rel] = data.decode("utf-8", errors="replace")
    if paths is None:
        for rel, real in links.through(root, links.classify(root)[0]).items():
            data = read_file(root, real)
            if data is not None and rel not in out:
                out[rel] = data.decode("utf-8", errors="replace")
    return out


def remove_tree(path: str | Path) -> None:
    """Remove a directory tree whatever a program made of it (any depth, links never followed); like
    `shutil.rmtree(path, ignore_errors=True)`, what cannot be removed stays."""
    p = Path(path)
    try:
        parent = os.open(p.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        rmtree_at(parent, p.name)
    except OSError:
        pass
    finally:
        os.close(parent)
