"""Kind `extraction`: reconcile an extracted JSON object with the authoritative figures of the document.

- Identification fields (currency, fiscal year, invoice number) are gates: a wrong one means the wrong
  document or period was read, and the score is 0.
- Money fields earn field-level credit when within tolerance of the truth (one part per million, at least one
  cent).
- Business rules (gross profit = revenue - cost, assets = liabilities + equity, total = subtotal + tax,
  amounts in full units) are checked on the answer's own values; the score is the fraction of money fields
  right times the fraction of rules that hold.
- Flags: a value the document does not support (stated nowhere in it, in any unit, although the true value
  is), and a value copied from the prompt's example answer. A flagged verdict does not pass.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.extract import parse_json_answer
from rlvr.verify.verdict import Check, Evidence, Flag, Verdict

IDENTITY_FIELDS = ("currency", "fiscal_year", "invoice_number")
TEXT_FIELDS = ("company",)
REL_TOL = 1e-6
ABS_TOL = 0.01


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def close(a: float, b: float) -> bool:
    """Within the money tolerance."""
    return abs(a - b) <= max(ABS_TOL, REL_TOL * abs(b)) + 1e-9


def _rule(doc: dict[str, Any], total: str, parts: list[tuple[int, str]]) -> tuple[bool, str]:
    values = [_num(doc.get(total))] + [_num(doc.get(p)) for _, p in parts]
    if any(v is None for v in values):
        return False, "fields missing"
    expected = sum(sign * (v or 0.0) for (sign, _), v in zip(parts, values[1:]))
    return close(values[0] or 0.0, expected), f"{total} = {values[0]}, rule gives {expected}"


RULES: dict[str, Callable[[dict[str, Any]], tuple[bool, str]]] = {
    "gross_profit": lambda d: _rule(d, "gross_profit", [(1, "revenue"), (-1, "cost_of_revenue")]),
    "operating_income": lambda d: _rule(d, "operating_income",
                                        [(1, "gross_profit"), (-1, "operating_expenses")]),
    "balance": lambda d: _rule(d, "total_assets", [(1, "total_liabilities"), (1, "total_equity")]),
    "invoice_total": lambda d: _rule(d, "total", [(1, "subtotal"), (1, "tax")]),
}
"""Business rules by name; a task's `facts.json` lists the ones that apply."""


def _units_rule(doc: dict[str, Any], truth: dict[str, Any], money: list[str]) -> tuple[bool, str]:
    in_thousands = [f for f in money if (v := _num(doc.get(f))) is not None and abs(truth[f]) >= 1000
                    and close(v * 1000, truth[f])]
    return not in_thousands, f"in thousands: {', '.join(in_thousands)}" if in_thousands else "full units"


def _flags(doc: dict[str, Any], truth: dict[str, Any], facts: dict[str, Any], money: list[str]) -> list[Flag]:
    scale = facts.get("scale", 1)
    stated = [n * s for n in facts.get("numbers", []) for s in {1, scale}]
    flags = []
    example = facts.get("example", {})
    copied = [f for f in money if _num(doc.get(f)) is not None and _num(example.get(f)) is not None
              and close(float(doc[f]), float(example[f])) and not close(truth[f], float(example[f]))]
    # a flagged field is a wrong field, which earns nothing on its own: the flag's value is neutralised in the
    # score (`Evidence.inert`), which stays what the right fields earn
    if copied:
        flags.append(Flag(kind="copied_example", message="values copied from the prompt's example answer",
                          evidence=[Evidence(seen=f"{f}={doc[f]}", inert=True) for f in copied[:5]]))
    unsupported = [f for f in money if (v := _num(doc.get(f))) is not None and f not in copied
                   and any(close(truth[f], s) for s in stated) and not any(close(v, s) for s in stated)]
    if unsupported:
        flags.append(Flag(kind="unsupported_value", message="values the document does not state in any unit",
                          evidence=[Evidence(seen=f"{f}={doc[f]}", inert=True) for f in unsupported[:5]]))
    return flags


def _field_ok(value: Any, truth: float) -> bool:
    v = _num(value)
    return v is not None and close(v, truth)


class ExtractionVerifier:
    """Field reconciliation with tolerances, business rules and integrity flags."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        try:
            truth = json.loads(task.hidden["truth.json"])
            facts = json.loads(task.hidden.get("facts.json", "{}"))
            rules = [RULES[r] for r in facts.get("rules", [])]
        except (KeyError, json.JSONDecodeError) as exc:
            return Verdict.infra(f"extraction task {task.key} has broken verification material: {exc!s:.200}")
        doc, why = parse_json_answer(final.answer)
        if why or not isinstance(doc, dict):
            return Verdict(score=0.0, checks=[Check(name="gate:json_object", score=0.0, weight=0.0,
                                                    detail=why or "the answer must be one JSON object")])
        gates = [Check(name=f"gate:{f}", score=float(ok), weight=0.0, passed=ok, detail=f"want {truth[f]!r}")
                 for f in IDENTITY_FIELDS if f in truth
                 for ok in [str(doc.get(f, "")).strip().casefold() == str(truth[f]).casefold()]]
        info = [Check(name=f"info:{f}", score=float(ok), weight=0.0, passed=True, detail=f"want {truth[f]!r}")
                for f in TEXT_FIELDS if f in truth
                for ok in [" ".join(str(doc.get(f, "")).split()).casefold() == truth[f].casefold()]]
        money = [f for f, v in truth.items() if isinstance(v, (int, float)) and f not in IDENTITY_FIELDS]
        fields = [Check(name=f"field:{f}", score=float(ok), passed=ok,
                        detail=f"want {truth[f]}, got {doc.get(f)!r}"[:120])
                  for f in money for ok in [_field_ok(doc.get(f), truth[f])]]
        rule_results = [r(doc) for r in rules] + [_units_rule(doc, truth, money)]
        rule_names = facts.get("rules", []) + ["units"]
        rule_checks = [Check(name=f"rule:{n}", score=float(ok), weight=0.0, passed=ok, detail=d)
                       for n, (ok, d) in zip(rule_names, rule_results)]
        flags = _flags(doc, truth, facts, money)
        checks = gates + info + fields + rule_checks
        if not all(g.passed for g in gates) or not fields:
            return Verdict(score=0.0, passed=False, checks=checks, flags=flags)
        field_score = sum(c.score for c in fields) / len(fields)
        rule_score = sum(ok for ok, _ in rule_results) / len(rule_results)
        passed = all(c.passed for c in fields + rule_checks) and not flags
        return Verdict(score=field_score * rule_score, passed=passed, checks=checks, flags=flags,
                       details={"field_score": field_score, "rule_score": rule_score})
