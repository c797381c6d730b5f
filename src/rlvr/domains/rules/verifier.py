"""Kind `rules`: business-rule checks declared in the task, compiled by rlvr into check functions.

A task lists its checks under `[verifier] checks` (TOML `[[verifier.checks]]` tables or JSON objects); each
names an operation from `OPS`, a path into the JSON answer and its operands. Nothing in a task is ever
evaluated as code: paths are parsed by `select`, patterns are regular expressions matched on answer text
capped in length, and every other operand is plain data. A check with `gate = true` is structural: when it
fails the score is 0 (how a right answer buried among wrong ones is refused); the others earn credit by
weight, and `partial = true` ones earn the fraction of items that satisfy them.

Paths: `total`, `lines[0].amount`, `assignments[*].shift` (`[*]` fans out over a list); the empty path is the
whole answer.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlvr.errors import UserError
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifierSettings, VerifyContext, settings_of
from rlvr.verify.extract import parse_json_answer
from rlvr.verify.verdict import Check, Verdict

MISSING = object()
_STEP = re.compile(r"([A-Za-z_][\w-]*)|\[(\d+|\*)\]|\.")


class CheckSpec(BaseModel):
    """One declared check."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str
    """Operation name, one of `OPS`."""
    path: str = ""
    """Where in the answer the operation looks."""
    name: str = ""
    """Label in the verdict (default: op and path)."""
    weight: float = Field(1.0, ge=0)
    """Credit weight of a non-gate check."""
    gate: bool = False
    """Structural check: failing it zeroes the score."""
    partial: bool = False
    """Earn the fraction of items that pass instead of all or nothing (each_in, allowed, at_most_per)."""
    value: Any = None
    """Expected value (equals, sum_equals)."""
    values: list[Any] | None = None
    """Allowed or required values (one_of, each_in, covers)."""
    tol: float = Field(0.0, ge=0)
    """Absolute tolerance of numeric comparisons."""
    min: float | None = None
    """Lower bound (range, count)."""
    max: float | None = None
    """Upper bound (range, count)."""
    pattern: str | None = None
    """Regular expression the whole text must match (matches)."""
    keys: list[str] | None = None
    """Exact key set of an object (keys)."""
    key: str | None = None
    """Field of each item that groups or indexes it (at_most_per, allowed)."""
    field: str | None = None
    """Field of each item whose value is constrained (allowed)."""
    allowed: dict[str, list[Any]] | None = None
    """For `allowed`: item[key] -> the values item[field] may take."""
    limit: int | None = None
    """For `at_most_per`: how many items may share a value of `key`."""
    exact: bool = False
    """For `covers`: the values must be exactly the listed set, not a superset."""


def parse_path(path: str) -> list[str | int]:
    """`a.b[2].c[*]` -> ["a", "b", 2, "c", "*"]; raises ValueError on anything else."""
    steps: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            raise ValueError(f"bad path {path!r} at character {pos}")
        if m.group(1):
            steps.append(m.group(1))
        elif m.group(2):
            steps.append("*" if m.group(2) == "*" else int(m.group(2)))
        pos = m.end()
    return steps


def select(doc: Any, path: str) -> list[Any]:
    """Every value at `path` (a list because `[*]` fans out); MISSING where a step does not exist."""
    current = [doc]
    for step in parse_path(path):
        nxt: list[Any] = []
        for value in current:
            if step == "*":
                nxt.extend(value if isinstance(value, list) else [MISSING])
            elif isinstance(step, int):
                nxt.append(value[step] if isinstance(value, list) and -len(value) <= step < len(value)
                           else MISSING)
            else:
                nxt.append(value.get(step, MISSING) if isinstance(value, dict) else MISSING)
        current = nxt
    return current


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _same(a: Any, b: Any, tol: float) -> bool:
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return abs(na - nb) <= tol + 1e-9
    return a is not MISSING and type(a) is type(b) and a == b


Outcome = tuple[float, str]
"""(score in [0, 1], detail)."""


def _one(ok: bool, detail: str) -> Outcome:
    return float(ok), detail


def _equals(vals: list[Any], c: CheckSpec) -> Outcome:
    return _one(len(vals) == 1 and _same(vals[0], c.value, c.tol), f"want {c.value!r}, got {_show(vals)}")


def _one_of(vals: list[Any], c: CheckSpec) -> Outcome:
    return _one(len(vals) == 1 and any(_same(vals[0], v, c.tol) for v in c.values or []),
                f"got {_show(vals)}")


def _range(vals: list[Any], c: CheckSpec) -> Outcome:
    n = [_number(v) for v in vals]
    ok = bool(n) and all(x is not None and (c.min is None or x >= c.min) and (c.max is None or x <= c.max)
                         for x in n)
    return _one(ok, f"want [{c.min}, {c.max}], got {_show(vals)}")


def _matches(vals: list[Any], c: CheckSpec) -> Outcome:
    ok = bool(vals) and all(isinstance(v, str) and len(v) <= 10_000 and re.fullmatch(c.pattern or "", v)
                            for v in vals)
    return _one(ok, f"want /{c.pattern}/, got {_show(vals)}")


def _keys(vals: list[Any], c: CheckSpec) -> Outcome:
    ok = bool(vals) and all(isinstance(v, dict) and sorted(v) == sorted(c.keys or []) for v in vals)
    return _one(ok, f"want keys {sorted(c.keys or [])}")


def _count(vals: list[Any], c: CheckSpec) -> Outcome:
    n = sum(v is not MISSING for v in vals)
    return _one((c.min is None or n >= c.min) and (c.max is None or n <= c.max), f"{n} items")


def _unique(vals: list[Any], c: CheckSpec) -> Outcome:
    seen = [repr(v) for v in vals if v is not MISSING]
    dup = sorted(k for k, n in Counter(seen).items() if n > 1)
    return _one(bool(seen) and not dup, f"repeated: {', '.join(dup[:3])}" if dup else "all distinct")


def _fraction(flags: list[bool], c: CheckSpec) -> float:
    if not flags:
        return 0.0
    return sum(flags) / len(flags) if c.partial else float(all(flags))


def _each_in(vals: list[Any], c: CheckSpec) -> Outcome:
    flags = [any(_same(v, w, c.tol) for w in c.values or []) for v in vals]
    return _fraction(flags, c), f"{sum(flags)}/{len(flags)} allowed"


def _covers(vals: list[Any], c: CheckSpec) -> Outcome:
    have, want = {repr(v) for v in vals}, {repr(v) for v in c.values or []}
    missing, extra = want - have, have - want
    ok = not missing and not (c.exact and extra)
    return _one(ok,
                f"missing {sorted(missing)[:3]}" if missing else f"extra {sorted(extra)[:3]}" if extra
                else "ok")


def _sum_equals(vals: list[Any], c: CheckSpec) -> Outcome:
    nums = [_number(v) for v in vals]
    ok = bool(nums) and None not in nums and _same(sum(n for n in nums if n is not None), c.value, c.tol)
    return _one(ok, f"want sum {c.value!r}")


def _at_most_per(vals: list[Any], c: CheckSpec) -> Outcome:
    counts = Counter(repr(v.get(c.key or "", MISSING)) if isinstance(v, dict) else "?" for v in vals)
    flags = [n <= (c.limit if c.limit is not None else 1) for n in counts.values()]
    return _fraction(flags, c), f"counts {dict(counts.most_common(3))}"


def _allowed(vals: list[Any], c: CheckSpec) -> Outcome:
    table = c.allowed or {}
    flags = [isinstance(v, dict) and isinstance(v.get(c.key or ""), str) and
             v.get(c.field or "") in table.get(v[c.key or ""], []) for v in vals]
    return _fraction(flags, c), f"{sum(flags)}/{len(flags)} allowed"


OPS: dict[str, Callable[[list[Any], CheckSpec], Outcome]] = {
    "equals": _equals, "one_of": _one_of, "range": _range, "matches": _matches, "keys": _keys,
    "count": _count,
    "unique": _unique, "each_in": _each_in, "covers": _covers, "sum_equals": _sum_equals,
    "at_most_per": _at_most_per, "allowed": _allowed,
}
"""The declarative operations: name -> function(values at the path, the check) -> (score, detail)."""


def _show(vals: list[Any]) -> str:
    return repr([None if v is MISSING else v for v in vals])[:80]


class RulesSettings(VerifierSettings):
    """The `[verifier]` table of a rules task."""

    checks: list[CheckSpec] = Field(default_factory=list, validate_default=True)
    """The declared checks (`[[verifier.checks]]` tables), at least one."""

    @field_validator("checks", mode="before")
    @classmethod
    def _non_empty(cls, value: Any) -> Any:
        if not isinstance(value, list) or not value:
            raise ValueError("a rules task needs a non-empty list of checks (add [[verifier.checks]] "
                             "tables with op and path)")
        return value

    def check(self, task: Task) -> None:
        """Every op is known, and every path and pattern parses."""
        where = task.source or task.key
        for i, spec in enumerate(self.checks):
            if spec.op not in OPS:
                raise UserError(f"unknown op {spec.op!r}", file=where, field=f"verifier.checks[{i}].op",
                                fix=f"one of {', '.join(sorted(OPS))}")
            try:
                parse_path(spec.path)
                if spec.pattern is not None:
                    re.compile(spec.pattern)
            except (ValueError, re.error) as exc:
                raise UserError(str(exc), file=where, field=f"verifier.checks[{i}]",
                                fix="fix the path or pattern") from None


def compile_checks(task: Task) -> list[tuple[CheckSpec, Callable[[Any], Outcome]]]:
    """The task's declared checks (validated settings) as callables over the answer."""
    return [(spec, lambda doc, s=spec, f=OPS[spec.op]: f(select(doc, s.path), s))
            for spec in settings_of(task, RulesSettings).checks]


class RulesVerifier:
    """Runs a task's compiled checks over its JSON answer."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        compiled = compile_checks(task)
        doc, why = parse_json_answer(final.answer)
        if why:
            return Verdict(score=0.0, checks=[Check(name="gate:json", score=0.0, weight=0.0, detail=why)])
        checks: list[Check] = []
        gates_ok = True
        for spec, run in compiled:
            score, detail = run(doc)
            label = spec.name or f"{spec.op}:{spec.path or '(answer)'}"
            if spec.gate:
                gates_ok = gates_ok and score >= 1.0
                checks.append(Check(name=f"gate:{label}", score=score, weight=0.0, passed=score >= 1.0,
                                    detail=detail))
            else:
                checks.append(Check(name=label, score=score, weight=spec.weight, passed=score >= 1.0,
                                    detail=detail))
        if not gates_ok:
            return Verdict(score=0.0, passed=False, checks=checks)
        if not any(c.weight > 0 for c in checks):  # only gates were declared, and all hold
            return Verdict(score=1.0, passed=True, checks=checks)
        return Verdict.from_checks(checks)
