"""The Verifier protocol and the verifier registry.

A verifier judges a task's final state and returns a Verdict. It never raises for the candidate's faults
(those are low scores or flags); `verify()` below also turns an unexpected exception inside a verifier into
an `infra_error` verdict, so one broken verifier never kills a batch nor scores an episode 0.
"""
from __future__ import annotations

import difflib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.verdict import Verdict


@dataclass
class VerifyContext:
    """What a verifier may use: a sandbox pool for running candidate code, and the verification seed."""

    pool: SandboxPool | None = None
    seed: int = 0
    extras: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class Verifier(Protocol):
    """Judges final states of tasks of one kind."""

    def verify(self, task: Task, final: FinalState) -> Verdict:
        ...


VerifierFactory = Callable[[VerifyContext], Verifier]
_VERIFIERS: dict[str, VerifierFactory] = {}
_UNAVAILABLE: dict[str, str] = {}


def register_verifier(kind: str, factory: VerifierFactory) -> None:
    """Register a verifier kind; duplicates are refused."""
    if kind in _VERIFIERS:
        raise ValueError(f"verifier {kind!r} is already registered")
    _VERIFIERS[kind] = factory


def verifier_kinds() -> list[str]:
    _load_builtin()
    return sorted(_VERIFIERS)


def _load_builtin() -> None:
    from rlvr.tasks import registry  # domain modules register their verifiers too

    registry.names()
    import importlib
    import pkgutil

    pkg = importlib.import_module("rlvr.verify")  # not `import ... as`: rlvr.verify is also a function name

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name in ("base", "verdict") or info.name.startswith("_"):
            continue
        try:
            importlib.import_module(f"rlvr.verify.{info.name}")
        except ModuleNotFoundError as exc:  # an optional dependency (rlvr[domains]) is missing
            _UNAVAILABLE[info.name] = f"needs {exc.name}"


def kind_of(task: Task) -> str:
    """The verifier kind of a task: `[verifier] kind` in the task, else its domain's verifier."""
    from rlvr.tasks.registry import verifier_kind

    kind = task.verifier.get("kind")
    return str(kind) if kind else verifier_kind(task.domain)


def make_verifier(kind: str, ctx: VerifyContext | None = None) -> Verifier:
    """Build a verifier of `kind`; an unknown kind answers with "did you mean"."""
    _load_builtin()
    if kind not in _VERIFIERS:
        close = difflib.get_close_matches(kind, list(_VERIFIERS), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(map(repr, close))}?" if close else f"known: {', '.join(sorted(_VERIFIERS))}"
        raise UserError(f"unknown verifier kind {kind!r}", field="verifier.kind", fix=hint)
    return _VERIFIERS[kind](ctx or VerifyContext())


def verify(task: Task, final: FinalState, ctx: VerifyContext | None = None) -> Verdict:
    """Verify with the task's verifier; an exception inside the verifier becomes an infra_error verdict."""
    t0 = time.perf_counter()
    remote = getattr(ctx.pool, "verify_remote", None) if ctx is not None else None
    if remote is not None:  # a cluster pool verifies on the node that runs the candidate (rlvr.scale)
        return remote(task, final, ctx.seed)
    verifier = make_verifier(kind_of(task), ctx)
    try:
        verdict = verifier.verify(task, final)
    except UserError:
        raise
    except Exception as exc:  # a verifier bug is an infra fault, not the policy's
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return Verdict.infra(f"verifier {kind_of(task)!r} crashed: {tb}",
                             timings={"total": time.perf_counter() - t0})
    if "total" not in verdict.timings:
        verdict = verdict.model_copy(update={"timings": {**verdict.timings, "total": time.perf_counter() - t0}})
    return verdict
