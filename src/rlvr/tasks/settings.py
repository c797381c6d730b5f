"""The typed view of `Task.verifier`: each verifier kind's settings model, validated once, when a task loads.

A verifier kind registers its model with `rlvr.verify.base.register_verifier(kind, factory, settings=Model)`,
which records it here. The record lives at the bottom of the pipeline so that the loaders (validation when a
task loads) and the env's tools (`visible_tests`) read the same typed settings the verifiers read. Like the
domain registry, this is a registry that imports its plugins: the modules of `PLUGINS` register the built-in
kinds when they are imported, by name, the first time a kind is looked up.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
import threading
import weakref
from pathlib import Path
from typing import TypeVar, overload

from pydantic import BaseModel, ConfigDict, ValidationError

from rlvr.errors import UserError
from rlvr.tasks.problems import validation_error
from rlvr.tasks.spec import Task

PLUGINS = "rlvr.verify"
"""The package whose modules register the built-in verifier kinds (and their settings) on import."""


class VerifierSettings(BaseModel):
    """The `[verifier]` table of a task, for a kind with no settings beyond `kind`; each kind with settings
    subclasses it. Unknown keys are refused, so a typo never silently weakens a task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str | None = None
    """Verifier kind; default the verifier of the task's domain."""

    def check(self, task: Task) -> None:
        """Checks of the settings against the rest of the task (e.g. that the files they name exist); raises
        UserError. Runs once, when the settings are first read."""

    def workspace_tests(self) -> list[str] | None:
        """The workspace tests the env's `run_tests` tool runs (None: every test_*.py / *_test.py file)."""
        return None


S = TypeVar("S", bound=VerifierSettings)
_MODELS: dict[str, type[VerifierSettings]] = {}
_CACHE: dict[tuple[int, type[VerifierSettings]], VerifierSettings] = {}
"""Validated settings by (id of the task, model); an entry leaves with its task."""
_unavailable: dict[str, str] = {}
_loaded = False
_done = False
_load_lock = threading.RLock()  # scorers on several threads look kinds up at once


def register_settings(kind: str, model: type[VerifierSettings]) -> None:
    """Record the settings model of a verifier kind (called by `register_verifier`)."""
    if not (isinstance(model, type) and issubclass(model, VerifierSettings)):
        raise TypeError(f"the settings of verifier {kind!r} must subclass VerifierSettings")
    _MODELS[kind] = model


def load_plugins() -> None:
    """Import the domains and every module of `PLUGINS` once; a module whose optional dependency is missing is
    listed in `unavailable()`."""
    global _loaded, _done
    if _done:
        return
    with _load_lock:  # a second thread waits for the first to finish, never sees a half-filled registry
        if _loaded:  # done, or a plugin's import re-entered on this thread
            return
        _loaded = True
        from rlvr.tasks.registry import names

        names()  # domain modules may register verifier kinds too
        pkg = importlib.import_module(PLUGINS)
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name in ("base", "verdict") or info.name.startswith("_"):
                continue
            try:
                importlib.import_module(f"{PLUGINS}.{info.name}")
            except ModuleNotFoundError as exc:  # an optional dependency (rlvr[domains]) is missing
                _unavailable[info.name] = f"needs {exc.name}"
        _done = True


def unavailable() -> dict[str, str]:
    """Verifier modules skipped because an optional dependency is missing, with the reason."""
    return dict(_unavailable)


def kind_of(task: Task) -> str:
    """The verifier kind of a task: `[verifier] kind` in the task, else its domain's verifier (the one key read
    before the kind's settings model is known)."""
    from rlvr.tasks.registry import verifier_kind

    kind = task.verifier.get("kind")
    return str(kind) if kind else verifier_kind(task.domain)


def unknown_kind(kind: str, known: list[str], task: Task | None = None) -> UserError:
    """The error for a kind no verifier is registered under: "did you mean", naming the task's file."""
    from rlvr.tasks.registry import is_registered

    where = (task.source or task.key) if task is not None else None
    if task is not None and kind == task.domain and not is_registered(kind):
        return UserError(f"unknown domain {kind!r} and no [verifier] kind", file=where, field="domain",
                         fix="register the domain or set [verifier] kind")
    close = difflib.get_close_matches(kind, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(map(repr, close))}?" if close else f"known: {', '.join(sorted(known))}"
    if _unavailable:
        hint += "; unavailable: " + ", ".join(f"{m} ({why})" for m, why in sorted(_unavailable.items()))
    return UserError(f"unknown verifier kind {kind!r}", file=where, field="verifier.kind", fix=hint)


@overload
def settings_of(task: Task) -> VerifierSettings: ...
@overload
def settings_of(task: Task, model: type[S]) -> S: ...
def settings_of(task: Task, model: type[VerifierSettings] | None = None) -> VerifierSettings:
    """The task's `[verifier]` table as `model` (default: the settings model of the task's verifier kind),
    validated once per task and model. A bad table is one UserError naming the task's file, the key and the fix
    ("did you mean" for a near miss)."""
    if model is None:
        load_plugins()
        kind = kind_of(task)
        if kind not in _MODELS:
            raise unknown_kind(kind, list(_MODELS), task)
        model = _MODELS[kind]
    key = (id(task), model)
    found = _CACHE.get(key)
    if found is None:
        try:
            found = model.model_validate(task.verifier)
        except ValidationError as exc:
            raise validation_error(exc, task.source or task.key, prefix="verifier.", model=model) from None
        found.check(task)
        _CACHE[key] = found
        weakref.finalize(task, _CACHE.pop, key, None)
    return found


def known_settings(task: Task) -> VerifierSettings | None:
    """The task's settings, or None when no verifier kind is registered for it: for layers that serve every
    task, like the env's tools, and work without a verifier."""
    load_plugins()
    return settings_of(task) if kind_of(task) in _MODELS else None


def checked(task: Task, file: str | Path | None = None) -> Task:
    """`task` once its `[verifier]` table has passed its kind's settings model: a bad key is one UserError naming
    `file` (default the task's source), the key and the fix. Every loader returns its tasks through here."""
    try:
        settings_of(task)
    except UserError as exc:
        if file is None or exc.file != (task.source or task.key):
            raise
        raise UserError(exc.what, file=file, field=exc.field, fix=exc.fix, line=exc.line) from None
    return task
