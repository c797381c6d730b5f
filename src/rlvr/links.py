"""What a workspace's symbolic links lead to: a link that stays inside the workspace is part of the work (read
as what it leads to), one that leads out of it is not (refused: never read, and reported).

Every reader of a final workspace goes through here: the sandbox's host-side reader
(`rlvr.sandbox.workspace`), the one `rlvr verify` uses (`rlvr.tasks.loaders.read_workspace`) and the env,
which refuses links out as the model makes them (`rlvr.envs.tools`). Targets are resolved lexically inside the
workspace, component by component, never by the host's own resolution of an absolute path: an absolute target
under the sandbox's mount point (`/workspace/pkg/a.py`) is the workspace's own path.
"""
from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

SANDBOX_ROOT = "/workspace"
"""Where jobs see the workspace: an absolute link target under it is inside the workspace."""
MAX_HOPS = 40
"""Links followed while resolving one path (a loop, or a longer chain, leads nowhere)."""
MAX_LINK_FILES = 2000
"""Files read through one link to a directory (a link is a convenience, not a way to double a workspace)."""


def resolve(root: Path, rel: str, sandbox_root: str = SANDBOX_ROOT) -> str | None:
    """The path inside `root` that `rel` leads to, links followed (never out of `root`); None when it leaves
    the workspace, loops or leads nowhere."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if not done:
                return None
            done.pop()
            continue
        here = root.joinpath(*done, part)
        try:
            st = os.lstat(here)
        except OSError:
            return None
        if not stat.S_ISLNK(st.st_mode):
            done.append(part)
            continue
        hops += 1
        if hops > MAX_HOPS:
            return None
        target = os.readlink(here)
        if target.startswith("/"):
            inside = _inside(target, root, sandbox_root)
            if inside is None:
                return None
            done, parts = [], [p for p in inside.split("/") if p] + parts
        else:
            parts = [p for p in target.split("/") if p] + parts
    return "/".join(done)


def _inside(target: str, root: Path, sandbox_root: str) -> str | None:
    """An absolute link target as a path inside the workspace, or None when it is outside."""
    for base in (sandbox_root, str(root)):
        base = base.rstrip("/")
        norm = posixpath.normpath(target)
        if norm == base:
            return ""
        if norm.startswith(base + "/"):
            return norm[len(base) + 1:]
    return None


def links(root: Path) -> list[str]:
    """Relative paths of every symbolic link under `root` (links to directories are not entered)."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                found.append(Path(p).relative_to(root).as_posix())
    return sorted(found)


def classify(root: Path, sandbox_root: str = SANDBOX_ROOT) -> tuple[dict[str, str], list[str]]:
    """({link: the path inside the workspace it leads to}, [links that lead out of it]). A dangling link
    inside the workspace is in neither: it leads to nothing that could be read."""
    inside: dict[str, str] = {}
    outside: list[str] = []
    for rel in links(root):
        target = resolve(root, rel, sandbox_root)
        if target is not None:
            inside[rel] = target
        elif _leaves(root, rel, sandbox_root):
            outside.append(rel)
    return inside, outside


def _leaves(root: Path, rel: str, sandbox_root: str) -> bool:
    """Whether the link at `rel` (or one it leads through) points out of the workspace, rather than to
    nothing."""
    here, hops = rel, 0
    while hops <= MAX_HOPS:
        hops += 1
        try:
            target = os.readlink(root / here)
        except OSError:
            return False
        if target.startswith("/"):
            inside = _inside(target, root, sandbox_root)
            if inside is None:
                return True
            nxt = inside
        else:
            nxt = posixpath.normpath(posixpath.join(posixpath.dirname(here), target))
            if nxt == ".." or nxt.startswith("../"):
                return True
        if not os.path.islink(root / nxt):
            return False
        here = nxt
    return False


def through(root: Path, inside: dict[str, str]) -> dict[str, str]:
    """Each workspace path a link makes readable -> the real path inside the workspace whose content it has:
    a link to a file is that file; a link to a directory, every regular file under it (links in it are not
    followed again)."""
    out: dict[str, str] = {}
    for link, target in inside.items():
        real = root / target if target else root
        if real.is_file():
            out[link] = target
        elif real.is_dir() and target:
            n = 0
            for dirpath, dirnames, filenames in os.walk(real, followlinks=False):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for name in sorted(filenames):
                    p = Path(dirpath) / name
                    if p.is_symlink() or not p.is_file() or n >= MAX_LINK_FILES:
                        continue
                    sub = p.relative_to(real).as_posix()
                    out[f"{link}/{sub}"] = f"{target}/{sub}"
                    n += 1
    return out
