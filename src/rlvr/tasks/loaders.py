"""Loaders for the on-disk task forms: task directories, packs of them, and JSONL packs.

Loading is lazy: a pack lists its members by directory name (or JSONL line offset) and reads a task's
files only when that task is asked for, so listing a pack of 10,000 tasks opens none of them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import tomllib
from pydantic import ValidationError

from rlvr import links
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.problems import validation_error
from rlvr.tasks.settings import checked
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Files, Task

TASK_TOML = "task.toml"

def read_tree(root: Path) -> Files:
    """Every regular file under `root` as text, keyed by POSIX relative path (sorted; symlinks refused)."""
    files: Files = {}
    if not root.is_dir():
        return files
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".pytest_cache"))
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                raise UserError("symlinks are not allowed in tasks", file=p, fix="copy the file instead")
            try:
                files[rel] = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise UserError("not a UTF-8 text file", file=p, fix="tasks hold text files only") from None
    return files


def read_workspace(path: str | Path) -> Files:
    """A final workspace directory as text files (caches skipped, bytes decoded leniently): its regular files,
    and what each symbolic link that stays inside it leads to, read at the link's path; a link out of it is
    never read (`refused_links` names it)."""
    root = Path(path)
    if not root.is_dir():
        raise UserError("no such workspace directory", file=root, fix="give the final state's directory")
    files: Files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED)
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            if not p.is_symlink() and p.is_file():
                files[p.relative_to(root).as_posix()] = p.read_bytes().decode("utf-8", "replace")
    for rel, real in links.through(root, links.classify(root)[0]).items():
        if not SKIPPED & set(rel.split("/")[:-1]):
            files.setdefault(rel, (root / real).read_bytes().decode("utf-8", "replace"))
    return files


SKIPPED = frozenset({"__pycache__", ".pytest_cache", ".git"})
"""Directories of a final workspace that are not the work (caches and version control)."""


def refused_links(path: str | Path) -> list[str]:
    """The symbolic links of a final workspace directory that lead out of it: refused, never read."""
    return [r for r in links.classify(Path(path))[1] if not SKIPPED & set(r.split("/"))]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"TOML syntax error: {exc}", file=path, fix="fix the syntax") from None


def load_task_dir(path: str | Path) -> Task:
    """Load one task directory (`task.toml`, `prompt.md`, `workspace/`, `hidden/`, optional `solution/`)."""
    path = Path(path)
    if not path.exists():
        raise UserError("no such task directory", file=path, fix="check the path")
    toml_path = path / TASK_TOML
    if not toml_path.is_file():
        raise UserError(f"missing {TASK_TOML}", file=path, fix=f"add {TASK_TOML} with id and domain")
    data = _read_toml(toml_path)
    for key in ("prompt", "workspace", "hidden", "solution", "source", "schema_version"):
        if key in data:
            raise UserError("set by the directory layout, not task.toml", file=toml_path, field=key,
                            fix="remove it from task.toml")
    prompt_path = path / "prompt.md"
    data["prompt"] = prompt_path.read_text(encoding="utf-8") if prompt_path.is_file() else ""
    data.setdefault("id", path.name)
    data["workspace"] = read_tree(path / "workspace")
    data["hidden"] = read_tree(path / "hidden")
    data["solution"] = read_tree(path / "solution") if (path / "solution").is_dir() else None
    data["source"] = str(path)
    domain = data.get("domain")
    if isinstance(domain, str) and registry.is_registered(domain):
        defaults = registry.entry(domain).task_defaults
        if defaults is not None:  # what a bare task directory of the domain leaves to it
            defaults(data, toml_path)
    try:
        task = Task(**data)
    except ValidationError as exc:
        raise validation_error(exc, toml_path, model=Task) from None
    return checked(task, file=toml_path)


def is_task_dir(path: Path) -> bool:
    return (path / TASK_TOML).is_file()


class TaskDirPack(TaskSource):
    """A directory of task directories. Listing reads directory names only."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise UserError("no such pack directory", file=self.path, fix="check the path")
        self._names = sorted(e.name for e in os.scandir(self.path) if e.is_dir()
                             and not e.name.startswith("."))
        self.name = self.path.name
        self.description = f"task pack at {self.path}"

    @property
    def size(self) -> int:
        return len(self._names)

    def id_at(self, index: int) -> str:
        return self._names[index]

    def get(self, index: int) -> Task:
        return load_task_dir(self.path / self._names[index])

    def find(self, task_id: str) -> Task:
        if task_id in self._names:
            return load_task_dir(self.path / task_id)
        return super().find(task_id)


class JsonlPack(TaskSource):
    """A JSONL file of Task records, one per line. Indexing scans for line offsets; lines parse on demand.

    A record needs `domain` and `prompt`; `id` defaults to `<file stem>-<line number>`.
    """

    def __init__(self, path: str | Path, domain: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError("no such JSONL file", file=self.path, fix="check the path")
        self.default_domain = domain
        self.name = self.path.stem
        self.description = f"JSONL pack at {self.path}"
        self._offsets: list[tuple[int, int]] = []  # (byte offset, 1-based line number)
        with self.path.open("rb") as f:
            pos, lineno = 0, 0
            for raw in f:
                lineno += 1
                if raw.strip():
                    self._offsets.append((pos, lineno))
                pos += len(raw)

    @property
    def size(self) -> int:
        return len(self._offsets)

    def _record(self, index: int) -> tuple[dict[str, Any], int]:
        off, lineno = self._offsets[index]
        with self.path.open("rb") as f:
            f.seek(off)
            raw = f.readline()
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})", file=self.path,
                            line=lineno, fix="each line must be one JSON object") from None
        if not isinstance(rec, dict):
            raise UserError("a line must be a JSON object", file=self.path, line=lineno,
                            fix="wrap it in {...}")
        return rec, lineno

    def get(self, index: int) -> Task:
        rec, lineno = self._record(index)
        rec.setdefault("id", f"{self.path.stem}-{lineno}")
        if self.default_domain is not None:
            rec.setdefault("domain", self.default_domain)
        rec["source"] = f"{self.path}:{lineno}"
        try:
            task = Task(**rec)
        except ValidationError as exc:
            raise validation_error(exc, self.path, line=lineno, model=Task) from None
        return checked(task)

    def validate_all(self) -> list[Task]:
        """Parse every line (used by `rlvr tasks validate`)."""
        return [self.get(i) for i in range(self.size)]


def open_path(path: str | Path) -> TaskSource:
    """A task source for a path: a task directory (a pack of one), a pack directory, or a JSONL file."""
    from rlvr.tasks.source import ListSource

    p = Path(path)
    if not p.exists():
        raise UserError("no such file or directory", file=p, fix="check the path")
    if p.is_file():
        if p.suffix != ".jsonl":
            raise UserError("not a task pack", file=p,
                            fix="give a task directory, a pack directory or a .jsonl file")
        return JsonlPack(p)
    if is_task_dir(p):
        task = load_task_dir(p)
        return ListSource([task], name=task.id, description=f"task directory {p}")
    return TaskDirPack(p)
