"""Verifier proofs: a task's gold state must score 1.0 with no flag and each negative control must earn 0.

Generic over verifier kinds: the gold state and the negative controls come from the task's domain
(`registry.make(task.domain).gold(task)` / `.negatives(task)`) or, for an unregistered domain, from the
TaskSource defaults. `rlvr tasks validate` runs `prove_rows` over its format report.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from rlvr.errors import UserError
from rlvr.progress import Progress
from rlvr.tasks import registry
from rlvr.tasks.source import ListSource, TaskSource
from rlvr.tasks.spec import Task
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.verdict import Verdict


@dataclass(frozen=True)
class ProofResult:
    """The outcome of verifying one gold state or negative control."""

    name: str
    """`gold` or the negative control's name (e.g. `untouched_workspace`)."""
    expect: str
    """`gold` (must score 1.0, pass, no flag) or `negative` (must not pass and earn reward 0)."""
    ok: bool
    """Whether the verdict met the expectation."""
    score: float
    """The verdict's score."""
    flags: tuple[str, ...]
    """Kinds of the verdict's flags."""
    detail: str
    """Why it failed (empty when ok)."""


def source_of(task: Task) -> TaskSource:
    """Where a task's gold state and negative controls come from: its domain's source, else the defaults."""
    if registry.is_registered(task.domain):
        return registry.make(task.domain)
    return ListSource([task], name=task.domain)


def _judge(name: str, expect: str, verdict: Verdict) -> ProofResult:
    kinds = tuple(f.kind for f in verdict.flags)
    if verdict.infra_error:
        return ProofResult(name, expect, False, verdict.score, kinds, f"infra error: {verdict.infra_error}")
    if expect == "gold":
        ok = verdict.passed and verdict.score == 1.0 and not kinds
        failing = next((f"{c.name}: {c.detail}" for c in verdict.checks if not c.passed), "")
        why = "" if ok else f"gold scored {verdict.score:.2f}" + (f", flags {list(kinds)}" if kinds
                                                                  else "") + (
            f" ({failing[:200]})" if failing else "")
        return ProofResult(name, expect, ok, verdict.score, kinds, why)
    ok = not verdict.passed and verdict.reward() == 0.0
    why = "" if ok else f"negative control {name!r} earned {verdict.reward():.2f}"
    return ProofResult(name, expect, ok, verdict.score, kinds, why)


def prove(task: Task, ctx: VerifyContext | None = None) -> list[ProofResult]:
    """Verify the gold state and every negative control of `task` (an empty list when it has neither)."""
    src = source_of(task)
    results: list[ProofResult] = []
    gold = src.gold(task)
    if gold is not None:
        results.append(_judge("gold", "gold", verify(task, gold, ctx)))
    for name, state in src.negatives(task).items():
        results.append(_judge(name, "negative", verify(task, state, ctx)))
    return results


def _row_detail(results: list[ProofResult]) -> tuple[bool, str]:
    if not any(r.expect == "gold" for r in results):
        note = "no gold state to prove"
    else:
        note = "gold 1.0"
    bad = [r.detail for r in results if not r.ok]
    if bad:
        return False, "; ".join(bad)
    negs = sum(r.expect == "negative" for r in results)
    return True, f"{note}, {negs} negative controls 0"


def prove_rows(rows: list[dict[str, Any]], ctx: VerifyContext | None = None) -> list[dict[str, Any]]:
    """Prove each loaded, format-valid row of `rlvr tasks validate`; rows come back with ok/detail updated."""
    todo = [r for r in rows if r.get("ok") and isinstance(r.get("loaded"), Task)]
    console = Console(stderr=True)
    with Progress(TextColumn("proving verifiers"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, unit="tasks") as progress:
        bar = progress.add_task("proving verifiers", total=len(todo))
        for row in todo:
            try:
                ok, detail = _row_detail(prove(row["loaded"], ctx))
            except UserError as exc:
                ok, detail = False, str(exc)
            # a domain's gold()/negatives() bug fails this row, not the whole report
            except Exception as exc:  # noqa: BLE001
                ok, detail = False, f"proof crashed: {type(exc).__name__}: {exc}"[:300]
            row["ok"] = ok
            row["detail"] = f"{row['detail']}; {detail}" if row.get("detail") else detail
            progress.advance(bar)
    return rows
