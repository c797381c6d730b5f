"""Task SPEC strings: `code`, `code:50`, `path/to/pack`, `math:20,humaneval:10`, `harbor:tasks` — a domain
name, a pack path, or `NAME:PATH` (tasks in a domain's own format at a path), each with an optional `:N`
sample size, several joined by commas."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.loaders import open_path
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task


@dataclass(frozen=True)
class Selection:
    """One part of a tasks SPEC: a source and how many of its tasks to take (None: all)."""

    source: TaskSource
    n: int | None

    def tasks(self, seed: int = 0, offset: int = 0) -> list[Task]:
        return self.source.sample(self.n, seed=seed, offset=offset)


def domain_path(spec: str) -> tuple[str, str] | None:
    """(domain, path) when `spec` is `NAME:PATH` for a registered domain that reads tasks from a path in its
    own format (`Domain.open_path`: `harbor:tasks/hello`); None otherwise."""
    name, sep, path = spec.partition(":")
    if not sep or not path or path.isdigit() or not registry.is_registered(name):
        return None
    if registry.entry(name).open_path is None:
        raise UserError(f"domain {name!r} reads no tasks from a path ({spec})", field="tasks",
                        fix=f"write {name} or {name}:N, or give a pack path")
    return name, path


def open_source(name_or_path: str, **config: object) -> TaskSource:
    """A registered domain by name, the tasks at a path in a domain's own format (`harbor:PATH`), else a pack
    at a path; unknown names get "did you mean"."""
    if registry.is_registered(name_or_path):
        return registry.make(name_or_path, **config)
    found = domain_path(name_or_path)
    if found is not None:
        opener = registry.entry(found[0]).open_path
        assert opener is not None
        return opener(found[1])
    if Path(name_or_path).exists():
        return open_path(name_or_path)
    if "/" in name_or_path or name_or_path.endswith(".jsonl") or name_or_path.startswith("."):
        raise UserError("no such file or directory", file=name_or_path, fix="check the path")
    registry.entry(name_or_path)  # raises with "did you mean"
    raise AssertionError("unreachable")


def parse(spec: str) -> list[Selection]:
    """Parse a tasks SPEC into selections."""
    if not spec or not spec.strip():
        raise UserError("empty tasks spec", field="tasks",
                        fix="give a domain name or a pack path, e.g. code:50")
    out: list[Selection] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        n: int | None = None
        head, sep, tail = part.rpartition(":")
        if sep and tail.isdigit() and head:
            part, n = head, int(tail)
            if n <= 0:
                raise UserError(f"sample size must be positive in {part}:{tail}", field="tasks",
                                fix="use :N with N >= 1")
        out.append(Selection(open_source(part), n))
    return out


def resolve(spec: str, seed: int = 0) -> list[Task]:
    """Every task a SPEC names, in a deterministic order."""
    tasks: list[Task] = []
    for sel in parse(spec):
        tasks.extend(sel.tasks(seed=seed))
    return tasks


def lookup(ref: str, settings: Mapping[str, Mapping[str, Any]] | None = None) -> Task:
    """One task by reference: a task directory path, `NAME:PATH` of one task in a domain's own format
    (`harbor:PATH`), `DOMAIN:INDEX`, or `DOMAIN/ID` / `PACK/ID`; a domain is built with its `settings` (as a
    run config's `[tasks.domains]`), so `DOMAIN:I` is the I-th task of the SPEC `DOMAIN` under the same
    settings."""
    settings = settings or {}
    if domain_path(ref) is not None:
        src = open_source(ref)
        if src.size == 1:
            return src.get(0)
        raise UserError("names several tasks", file=ref, fix="name one task directory inside it")
    p = Path(ref)
    if p.exists():
        src = open_path(p)
        if src.size == 1:
            return src.get(0)
        raise UserError("is a pack, not a task", file=p, fix="name one task directory inside it")
    head, sep, tail = ref.rpartition(":")
    if sep and tail.isdigit() and registry.is_registered(head):
        return registry.make(head, **settings.get(head, {})).get(int(tail))
    head, sep, tail = ref.partition("/")
    if sep and registry.is_registered(head):
        return registry.make(head, **settings.get(head, {})).find(tail)
    if sep and Path(head).exists():
        return open_path(head).find(tail)
    raise UserError(f"no task {ref!r}", fix="give a task directory, DOMAIN:INDEX or DOMAIN/ID")
