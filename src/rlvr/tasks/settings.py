"""The typed view of `Task.verifier`: each verifier kind's settings model, validated once, when a task loads.

A domain declares its verifier kinds, each with the model of its tasks' `[verifier]` tables, in its `Domain`
record (`rlvr.tasks.domain`); the registry loads it, and this module reads it. The record lives at the bottom
of the pipeline so that the loaders (validation when a task loads) and the env's tools (`visible_tests`) read
the same typed settings the verifiers read. Kinds that belong to no domain (`answer`) are registered the same
way (`rlvr.tasks.registry.register_kind`), so every kind is read through one path.
"""
from __future__ import annotations

import difflib
import threading
import weakref
from pathlib import Path
from typing import TypeVar, overload

from pydantic import ValidationError

from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.domain import VerifierSettings
from rlvr.tasks.problems import validation_error
from rlvr.tasks.spec import Task

__all__ = ["VerifierSettings", "checked", "kind_of", "known_kinds", "known_settings", "model_of",
           "settings_of",
           "unknown_kind"]


S = TypeVar("S", bound=VerifierSettings)
_CACHE: dict[tuple[int, type[VerifierSettings]], VerifierSettings] = {}
"""Validated settings by (id of the task, model); an entry leaves with its task."""
_cache_lock = threading.Lock()


def model_of(kind: str) -> type[VerifierSettings] | None:
    """The settings model of verifier kind `kind` (None: nothing registered declares it)."""
    found = registry.verifier_of(kind)
    return found.settings if found is not None else None


def known_kinds() -> list[str]:
    """Every verifier kind: those of the loaded domains and those that belong to none (`answer`)."""
    return registry.kinds()


def kind_of(task: Task) -> str:
    """The verifier kind of a task: `[verifier] kind` in the task, else its domain's verifier (the one key
    read before the kind's settings model is known)."""
    kind = task.verifier.get("kind")
    return str(kind) if kind else registry.verifier_kind(task.domain)


def unknown_kind(kind: str, known: list[str], task: Task | None = None) -> UserError:
    """The error for a kind no verifier is registered under: "did you mean", naming the task's file."""
    where = (task.source or task.key) if task is not None else None
    if task is not None and kind == task.domain and not registry.is_registered(kind):
        return UserError(f"unknown domain {kind!r} and no [verifier] kind", file=where, field="domain",
                         fix="register the domain or set [verifier] kind")
    close = difflib.get_close_matches(kind, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(map(repr, close))}?" if close else f"known: {', '.join(sorted(known))}"
    missing = registry.unavailable()
    if missing:
        hint += "; not loaded: " + "; ".join(f"{m}: {why}" for m, why in sorted(missing.items()))
    return UserError(f"unknown verifier kind {kind!r}", file=where, field="verifier.kind", fix=hint)


@overload
def settings_of(task: Task) -> VerifierSettings: ...
@overload
def settings_of(task: Task, model: type[S]) -> S: ...
def settings_of(task: Task, model: type[VerifierSettings] | None = None) -> VerifierSettings:
    """The task's `[verifier]` table as `model` (default: the settings model of the task's verifier kind),
    validated once per task and model. A bad table is one UserError naming the task's file, the key and the
    fix ("did you mean" for a near miss)."""
    if model is None:
        kind = kind_of(task)
        declared = model_of(kind)
        if declared is None:
            raise unknown_kind(kind, known_kinds(), task)
        model = declared
    key = (id(task), model)
    found = _CACHE.get(key)
    if found is None:
        try:
            found = model.model_validate(task.verifier)
        except ValidationError as exc:
            raise validation_error(exc, task.source or task.key, prefix="verifier.", model=model) from None
        found.check(task)
        with _cache_lock:
            if key not in _CACHE:
                _CACHE[key] = found
                weakref.finalize(task, _CACHE.pop, key, None)
    return found


def known_settings(task: Task) -> VerifierSettings | None:
    """The task's settings, or None when no verifier kind is registered for it: for layers that serve every
    task, like the env's tools, and work without a verifier."""
    return settings_of(task) if model_of(kind_of(task)) is not None else None


def checked(task: Task, file: str | Path | None = None) -> Task:
    """`task` once its `[verifier]` table has passed its kind's settings model: a bad key is one UserError
    naming `file` (default the task's source), the key and the fix. Every loader returns its tasks through
    here."""
    try:
        settings_of(task)
    except UserError as exc:
        if file is None or exc.file != (task.source or task.key):
            raise
        raise UserError(exc.what, file=file, field=exc.field, fix=exc.fix, line=exc.line) from None
    return task
