"""The code verifier's cases: fixed io cases read from the task, randomised cases drawn in the sandbox by the
task's generator and reference (`[verifier.cases]`), and the candidate's results for them judged on the host.

The harness runs the candidate on the cases' inputs and streams one result a case on its channel; the
comparison with the expected outputs (`rlvr.verify.values`: tagged values, tolerances) never runs candidate
code.
"""
from __future__ import annotations

import ast
import json
from typing import Any

from rlvr.domains.code.harness import CASES, VALUES, harness_files
from rlvr.domains.code.harness.report import RunReport
from rlvr.domains.code.settings import CodeSettings, IOSettings
from rlvr.domains.code.workspace import JUDGE
from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.limits import for_task
from rlvr.tasks.spec import Task
from rlvr.verify.values import NotPlain, decode, encode, identical, same
from rlvr.verify.verdict import Check


def io_expected(task: Task, s: IOSettings) -> dict[str, list[Any]]:
    """The task's fixed io cases, parsed as Python literals (never executed): `{"inputs": [encoded argument
    lists], "outputs": [expected values]}`, the shape the case check compares; a bad file is a UserError."""
    return io_literals(task.hidden[s.file], task, f"verifier.io.file ({s.file})")


def io_literals(text: str, task: Task, field: str) -> dict[str, list[Any]]:
    """io cases from `text`, one Python literal `(args_tuple, expected)` a line (parsed, never executed), as
    `io_expected` gives them; a bad line is a UserError naming the task's file and `field`."""
    out: dict[str, list[Any]] = {"inputs": [], "outputs": []}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            case = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            case = None
        if not (isinstance(case, tuple) and len(case) == 2 and isinstance(case[0], tuple)):
            raise UserError("an io case must be a Python literal `(args_tuple, expected)`", file=task.source,
                            line=lineno, field=field, fix="write one case a line")
        args = encode(list(case[0]))
        if args is None or encode(case[1]) is None:
            raise UserError("an io case holds a value that is not plain data", file=task.source, line=lineno,
                            field=field, fix="use numbers, strings, lists, tuples, dicts")
        out["inputs"].append(args["v"])
        out["outputs"].append(case[1])
    if not out["inputs"]:
        raise UserError("no io cases", file=task.source, field=field,
                        fix="write one `(args, expected)` literal a line")
    return out


def draw_cases(pool: SandboxPool, task: Task, s: CodeSettings, seed: int,
               extra: list[list[Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """The randomised cases `{"inputs", "outputs", "extra"}`: the task's generator draws `n` inputs from
    `seed` in the sandbox and its reference answers them (and the `extra` probe inputs); or (None, why) when
    either fails."""
    assert s.cases is not None
    h = harness_files()
    files = {f"{JUDGE}/{CASES}": h[CASES], f"{JUDGE}/{VALUES}": h[VALUES],
             f"{JUDGE}/gen.py": task.hidden[s.cases.generator],
             f"{JUDGE}/ref.py": task.hidden[s.cases.reference]}
    function = s.cases.entry.rsplit(":", 1)[1]  # type: ignore[index]
    cfg = {"generator": f"{JUDGE}/gen.py", "reference": f"{JUDGE}/ref.py", "seed": seed, "n": s.cases.n,
           "function": function, "extra": [encode(a)["v"] for a in extra]}
    own = for_task(pool, task, timeout_s=s.timeout_s)
    limits = for_task(pool, task, timeout_s=own.timeout_s, memory_mb=max(own.memory_mb, 256))
    res = pool.run(["python", f"{JUDGE}/{CASES}"], files=files, stdin=json.dumps(cfg) + "\n", limits=limits)
    if not res.ok:
        return (None,
                f"the task's case generator or reference failed ({res.status.value}): {res.stderr[-300:]}")
    try:
        return json.loads(res.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, "the task's case generator printed no cases"


def call_args(encoded: Any) -> list[Any]:
    """The argument values of one case's encoded input (positional: the list; keyword: the dict's values); an
    input that does not decode has none."""
    try:
        args = decode(encoded)
    except (NotPlain, TypeError, KeyError, ValueError):
        return []
    if isinstance(args, dict):
        return list(args.values())
    return list(args) if isinstance(args, list | tuple) else [args]


def case_results(s: CodeSettings, rep: RunReport, expected: dict[str, Any]) -> list[tuple[bool, Any, Any]]:
    """(ok, got, want) per case: randomised cases (tagged reference outputs, lists and tuples alike) or io
    cases (literal expected values, strict types), compared on the host with what the candidate sent back."""
    spec = s.cases or s.io
    assert spec is not None
    out: list[tuple[bool, Any, Any]] = []
    for i, raw in enumerate(expected["outputs"]):
        want = decode(raw) if s.cases else raw
        msg, got, ok = rep.cases.get(i), None, False
        if msg and msg.get("out") is not None:
            try:
                got = decode(msg["out"]["v"])
                ok = same(got, want, spec.tolerance) if s.cases else identical(got, want, spec.tolerance)
            except (NotPlain, TypeError, KeyError, ValueError):
                ok = False
        out.append((ok, got, want))
    return out


def cases_check(s: CodeSettings, rep: RunReport, expected: dict[str, Any],
                results: list[tuple[bool, Any, Any]]) -> Check:
    """The cases' check from their results (`case_results`)."""
    spec = s.cases or s.io
    assert spec is not None
    good, first_bad = 0, ""
    for i, (inp, (ok, _, _)) in enumerate(zip(expected["inputs"], results)):
        msg = rep.cases.get(i)
        good += ok
        if not ok and not first_bad:
            seen = (msg or {}).get("error") or ("not plain data" if msg else "not run")
            first_bad = (f"case {i}: input {json.dumps(inp)[:200]}: "
                         f"{seen if not msg or msg.get('out') is None else 'wrong'}")
    n = len(expected["inputs"])
    detail = rep.cases_error or first_bad
    if rep.payload and rep.payload.get("timed_out") and good < n:
        detail = "timed out; " + detail
    score = good / n if n else 0.0
    if s.io is not None and not s.io.partial:
        score = float(score == 1.0)
    return Check(name=f"{'cases' if s.cases else 'io'}:{spec.entry}", score=score, weight=spec.weight,
                 passed=good == n, detail=detail)


def check_case_stream(rep: RunReport, n: int) -> None:
    """Every case reported once, in order, before the end of the run (or none after a failed import): anything
    else on the channel was written by someone other than the harness."""
    if any(not 0 <= i < n for i in rep.cases) or rep.duplicate_cases:
        rep.findings.add("report_forgery", None, None, "case results out of range or reported twice")
    elif rep.ended and not rep.cases_error and len(rep.cases) < n:
        rep.findings.add("report_forgery", None, None,
                         f"the run reported its end after {len(rep.cases)} of {n} case results")
