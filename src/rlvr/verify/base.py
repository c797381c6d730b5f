"""The Verifier protocol, and building the verifier of a kind: every kind comes from the registry
(`rlvr.tasks.registry`: the kinds the domains declare in their `Domain` records, and `answer`, which belongs
to none).

A verifier judges a task's final state and returns a Verdict. It never raises for the candidate's faults
(those are low scores or flags); `verify()` below also turns an unexpected exception inside a verifier into
an `infra_error` verdict, so one broken verifier never kills a batch nor scores an episode 0.

A task's `[verifier]` table is validated against its kind's settings model when the task loads
(`rlvr.tasks.settings`, from the model the kind's record names); verifiers and tools then read it typed,
through `settings_of(task)`.
"""
from __future__ import annotations

import hashlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool, environment_of, in_environment
from rlvr.tasks import registry
from rlvr.tasks.settings import VerifierSettings, kind_of, known_kinds, settings_of, unknown_kind
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.verdict import Verdict

__all__ = ["Verifier", "VerifierFactory", "VerifierSettings", "VerifyContext", "derive_seed", "kind_of",
           "make_verifier", "settings_of", "verifier_kinds", "verify"]


@dataclass
class VerifyContext:
    """What a verifier may use: a sandbox pool for running candidate code, and the verification seed."""

    pool: SandboxPool | None = None
    """Where candidate code runs (None: the process-wide default pool)."""
    seed: int = 0
    """The verification seed: a verifier that draws randomness (randomised hidden cases) derives it from this
    (`derive_seed`), never from the clock or the OS, and records it in `Verdict.seed`."""
    extras: dict[str, object] = field(default_factory=dict)
    """Verifier-specific options (e.g. the mesh verifier's `preview_dir`)."""


@runtime_checkable
class Verifier(Protocol):
    """Judges final states of tasks of one kind."""

    def verify(self, task: Task, final: FinalState) -> Verdict:
        ...


VerifierFactory = Callable[[VerifyContext], Verifier]


def verifier_kinds() -> list[str]:
    """Every verifier kind that can be built."""
    return known_kinds()


def make_verifier(kind: str, ctx: VerifyContext | None = None) -> Verifier:
    """Build a verifier of `kind`; an unknown kind answers with "did you mean"."""
    spec = registry.verifier_of(kind)
    if spec is None:
        raise unknown_kind(kind, known_kinds())
    verifier: Verifier = spec.factory(ctx or VerifyContext())
    return verifier


def derive_seed(seed: int, *parts: str) -> int:
    """A 32-bit seed drawn deterministically from a verification seed and labels (e.g. the task key): how a
    verifier that needs randomness gets it, so the same (task, final state, seed) gives the same verdict."""
    digest = hashlib.blake2b(":".join((str(seed), *parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


_default_pool: SandboxPool | None = None


def default_pool() -> SandboxPool:
    """The process-wide sandbox pool used when a VerifyContext brings none."""
    global _default_pool
    if _default_pool is None:
        from rlvr.sandbox import make_pool

        # the isolated pool; no bubblewrap is a UserError, never a silent fallback
        _default_pool = make_pool()
    return _default_pool


def verify(task: Task, final: FinalState, ctx: VerifyContext | None = None) -> Verdict:
    """Verify here, with the task's verifier; an exception inside the verifier becomes an infra_error verdict.

    This is the local primitive: callers that turn an episode into a reward go through `rlvr.verify.scorer`
    (which also dispatches to a pool that verifies on its own nodes)."""
    t0 = time.perf_counter()
    env = environment_of(task)
    if task.requirements or env:  # the task's programs run with its packages, in its image
        from dataclasses import replace

        from rlvr.sandbox.requirements import pool_for

        ctx = ctx or VerifyContext()
        pool = ctx.pool or default_pool()
        pool = pool_for(pool, task.requirements) if task.requirements else pool
        ctx = replace(ctx, pool=in_environment(pool, **env))
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
        verdict = verdict.model_copy(update={"timings": {**verdict.timings,
                                                         "total": time.perf_counter() - t0}})
    return verdict
