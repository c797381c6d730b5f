"""Format validation of tasks and packs (`rlvr tasks validate`). Verifier proofs are added by
`rlvr.verify.proof`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.loaders import JsonlPack, TaskDirPack, load_task_dir
from rlvr.tasks.selection import domain_path, open_source
from rlvr.tasks.settings import checked
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task


def format_problems(task: Task) -> list[str]:
    """Problems with a loaded task that neither the record's types nor its verifier settings (checked when it
    loads: an unknown verifier kind, a code task without hidden tests) express."""
    problems: list[str] = []
    if not task.prompt.strip():
        problems.append("empty prompt (prompt.md, or a Harbor task's instruction.md, missing or blank)")
    overlap = set(task.workspace) & set(task.hidden)
    if overlap:
        problems.append(f"hidden files also in the workspace: {sorted(overlap)[:3]}")
    return problems


def iter_tasks(path: str | Path | None, domain: str | None, n: int) -> tuple[TaskSource | None,
                                                                             list[tuple[str, Any]]]:
    """(source, [(label, Task or UserError)]) for a path, `NAME:PATH` (tasks in a domain's own format) or a
    domain sample."""
    items: list[tuple[str, Any]] = []
    if domain is not None:
        src = registry.make(domain)
        for i in src.indices(n):
            try:
                items.append((f"{domain}:{i}", checked(src.get(i))))  # built in code: checked here
            except UserError as exc:
                items.append((f"{domain}:{i}", exc))
        return src, items
    assert path is not None
    if domain_path(str(path)) is not None:
        own = open_source(str(path))
        for i in range(own.size or 0):
            try:
                items.append((own.id_at(i), own.get(i)))
            except UserError as exc:
                items.append((own.id_at(i), exc))
        return own, items
    path = Path(path)
    if not path.exists():
        raise UserError("no such file or directory", file=path, fix="check the path")
    if path.is_dir() and (path / "task.toml").is_file():
        try:
            items.append((path.name, load_task_dir(path)))
        except UserError as exc:
            items.append((path.name, exc))
        return None, items
    src2: TaskSource = JsonlPack(path) if path.is_file() else TaskDirPack(path)
    for i in range(src2.size or 0):
        label = src2.id_at(i) if isinstance(src2, TaskDirPack) else f"{path.name}:{i + 1}"
        try:
            items.append((label, src2.get(i)))
        except UserError as exc:
            items.append((label, exc))
    return src2, items


def validate_format(path: str | Path | None, domain: str | None = None, n: int = 5) -> list[dict[str, Any]]:
    """One row per task: {task, ok, detail, loaded} where `loaded` is the Task when it parsed."""
    _, items = iter_tasks(path, domain, n)
    rows: list[dict[str, Any]] = []
    for label, item in items:
        if isinstance(item, UserError):
            rows.append({"task": label, "ok": False, "detail": str(item), "loaded": None})
            continue
        problems = format_problems(item)
        rows.append({"task": label, "ok": not problems, "detail": "; ".join(problems) or "format ok",
                     "loaded": item})
    return rows
