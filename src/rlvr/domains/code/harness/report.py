"""Reading the harness's signed result on the host: authentication, protocol checks and per-test outcomes."""
from __future__ import annotations

import ast
import hashlib
import hmac
import json
import operator
import re
from dataclasses import dataclass, field
from typing import Any

from rlvr.domains.code.harness import RESULT_MARK
from rlvr.verify.findings import Findings
from rlvr.verify.values import NotPlain, decode

OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
       ">=": operator.ge, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b}
PARAMS = re.compile(r"\[.*\]$")


@dataclass
class RunReport:
    """What the harness saw, after authentication and protocol checks."""

    payload: dict[str, Any] | None
    """The signed payload, or None when no authentic result came back."""
    findings: Findings = field(default_factory=Findings)
    collected: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    """Item id -> passed / failed / skipped / xfailed / error."""
    details: dict[str, str] = field(default_factory=dict)
    collect_errors: list[str] = field(default_factory=list)
    cases: dict[int, dict[str, Any]] = field(default_factory=dict)
    duplicate_cases: int = 0
    """Case results that arrived for an index already reported (the harness sends each once)."""
    cases_error: str | None = None
    fresh: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Results of the differential check's fresh inputs, by index (like `cases`)."""
    duplicate_fresh: int = 0
    fresh_error: str | None = None
    ended: bool = False
    call_at: dict[str, float] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    """Item id -> seconds of its call phase, timed by the supervisor's clock from the arrival of the worker's
    messages (outside the candidate's process: patching its clock changes nothing here)."""
    sub_failed: set[str] = field(default_factory=set)
    """Items with a failed sub-test (unittest `subTest`): failed whatever their own report says."""


def authenticate(stdout: str, key: str) -> tuple[dict[str, Any] | None, int]:
    """(payload of the one correctly signed result line, number of forged result lines).

    A last line without its newline was cut (the sandbox ended the supervisor while it wrote, at the run's
    deadline or its memory cap): it counts if its signature holds and is not a forgery if it does not. A
    forgery is a whole line."""
    good, forged = None, 0
    lines = stdout.split("\n")
    for n, line in enumerate(lines):
        if not line.startswith(RESULT_MARK):
            continue
        parts = line.split(" ", 2)
        ok = len(parts) == 3 and hmac.compare_digest(
            hmac.new(bytes.fromhex(key), parts[2].encode(), hashlib.sha256).hexdigest(), parts[1])
        if ok and good is None:
            good = json.loads(parts[2])
        elif n < len(lines) - 1:
            forged += 1
    return good, forged


def interpret(payload: dict[str, Any], unconditional: set[str]) -> RunReport:
    """Turn the worker's message stream into outcomes, checking the protocol on the way."""
    rep = RunReport(payload=payload)
    f = rep.findings
    msgs = payload.get("messages", [])
    if payload.get("malformed"):
        f.add("report_forgery", None, None, f"{payload['malformed']} malformed lines on the report channel")
    if msgs and msgs[0].get("t") != "hello":
        f.add("report_forgery", None, None, "the report channel did not start with the harness's greeting")
    seen: set[tuple[str, str]] = set()
    records: dict[str, list[dict[str, Any]]] = {}
    for msg in msgs[1:]:
        kind = msg.get("t")
        if rep.ended:
            f.add("report_forgery", None, None, f"message {kind!r} after the end of the run")
            break
        handler = _HANDLERS.get(kind)
        if handler is None:
            f.add("report_forgery", None, None, f"unknown message {str(kind)[:40]!r} on the report channel")
            continue
        handler(rep, msg, seen, records)
    for nid in rep.sub_failed:
        if rep.outcomes.get(nid) != "error":
            rep.outcomes[nid] = "failed"
    _cross_check(rep, records, unconditional)
    _caps(rep, payload.get("caps") or {})
    if rep.ended and payload.get("exit_code") != 0:
        f.add("report_forgery", None, None, "the test process reported its end but then ended abnormally "
              f"(exit {payload.get('exit_code')}, signal {payload.get('signal')})")
    # died mid-suite: flagged, and what it never reported fails
    if not rep.ended and not payload.get("timed_out"):
        last = next((m.get("id") or m.get("test") for m in reversed(msgs) if m.get("id") or m.get("test")),
                    None)
        how = f"exited (code {payload['exit_code']})" if payload.get("exit_code") is not None else \
            f"died (signal {payload.get('signal')})" if payload.get("signal") is not None else None
        if how:
            untold = [c for c in rep.collected if c not in rep.outcomes]
            f.add("exit_trick", None, None, f"the test process {how} before the harness finished"
                  + (f"; last seen {last}" if last else "") + (f"; {len(untold)} tests never reported fail"
                                                               if untold else ""))
    return rep


def _caps(rep: RunReport, caps: dict[str, Any]) -> None:
    """Caps the run hit on purpose, as the supervisor saw them: a file system filled up, a file written to the
    size cap, a worker that survived the SIGTERM at the deadline (only a handler that ignores it does)."""
    for path in caps.get("disk_full") or []:
        rep.findings.add("resource_exhaustion", None, None, f"filled the file system at {str(path)[:80]}")
    if caps.get("file_at_cap"):
        rep.findings.add("resource_exhaustion", None, None,
                         f"wrote a file to the size cap: {str(caps['file_at_cap'])[:80]}")
    if caps.get("ignored_sigterm"):
        rep.findings.add("resource_exhaustion", None, None,
                         "ignored the SIGTERM at the deadline (a handler that ignores termination); killed")


def _on_call(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    nid = str(msg.get("id"))
    if nid in rep.call_at or nid not in rep.collected:
        rep.findings.add("report_forgery", None, None, f"duplicate or uncollected call start for {nid}")
        return
    rep.call_at[nid] = float(msg.get("at") or 0.0)


def _on_collected(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    if rep.collected:
        rep.findings.add("report_forgery", None, None, "a second collection report")
    rep.collected = [str(i) for i in msg.get("ids", [])]


def _on_report(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    nid, when, outcome = str(msg.get("id")), str(msg.get("when")), str(msg.get("outcome"))
    if msg.get("sub"):  # one of many under the same id: it can fail its test, never pass it
        if nid not in rep.collected or (nid, "call") in seen:
            rep.findings.add("report_forgery", None, None, f"uncollected or late sub-test report for {nid}")
        elif outcome == "failed":
            rep.sub_failed.add(nid)
            rep.details.setdefault(nid, str(msg.get("detail") or "a sub-test failed"))
        return
    if (nid, when) in seen or nid not in rep.collected:
        rep.findings.add("report_forgery", None, None, f"duplicate or uncollected report for {nid} ({when})")
        if nid in rep.collected:  # two reports for one phase: neither is the judge's word, so the test fails
            rep.outcomes[nid] = "error"
            rep.details.setdefault(nid, "reported twice")
        return
    seen.add((nid, when))
    prev = rep.outcomes.get(nid)
    if outcome == "skipped":
        rep.outcomes[nid] = "xfailed" if msg.get("xfail") else "skipped"
    elif outcome == "failed":
        rep.outcomes[nid] = "failed" if when == "call" else "error"
    elif when == "call" and prev is None:
        rep.outcomes[nid] = "passed"
    if when == "call" and nid in rep.call_at:
        rep.durations[nid] = float(msg.get("at") or 0.0) - rep.call_at[nid]
    if outcome != "passed" and msg.get("detail"):
        rep.details[nid] = str(msg["detail"])


def _on_cmp(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    records.setdefault(str(msg.get("test")), []).append(msg)
    if msg.get("l") is None or msg.get("r") is None or msg.get("op") not in OPS:
        return
    try:
        host = bool(OPS[msg["op"]](decode(msg["l"]["v"]), decode(msg["r"]["v"])))
    except (NotPlain, TypeError, KeyError, ValueError):
        return
    if host != bool(msg.get("res")):
        rep.findings.add("report_forgery", msg.get("test"), msg.get("line"),
                         f"assert {msg['op']} claimed {msg.get('res')} but its values give {host}")


def _on_event(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    where = f" (during {msg['test']})" if msg.get("test") else ""
    rep.findings.add(str(msg.get("kind", "report_forgery")), msg.get("file"), msg.get("line"),
                     f"{msg.get('what', '')}{where}", inert=msg.get("inert") is True)


def _on_collect_error(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    rep.collect_errors.append(f"{msg.get('id')}: {str(msg.get('detail', ''))[-600:]}")


def _on_case(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    try:
        i = int(msg.get("i", -1))
    except (TypeError, ValueError):
        i = -1
    if i in rep.cases:
        rep.duplicate_cases += 1
        return  # the first result counts; the host flags the stream
    rep.cases[i] = msg


def _on_cases_error(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    rep.cases_error = str(msg.get("detail", ""))


def _on_fresh(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    try:
        i = int(msg.get("i", -1))
    except (TypeError, ValueError):
        i = -1
    if i in rep.fresh:
        rep.duplicate_fresh += 1
        return
    rep.fresh[i] = msg


def _on_fresh_error(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    rep.fresh_error = str(msg.get("detail", ""))


def _on_end(rep: RunReport, msg: dict, seen: set, records: dict) -> None:
    rep.ended = True


_HANDLERS = {"collected": _on_collected, "report": _on_report, "cmp": _on_cmp, "event": _on_event,
             "collect_error": _on_collect_error, "case": _on_case, "cases_error": _on_cases_error,
             "end": _on_end,
             "call": _on_call, "fresh": _on_fresh, "fresh_error": _on_fresh_error}


def _cross_check(rep: RunReport, records: dict[str, list[dict[str, Any]]], unconditional: set[str]) -> None:
    """A passed test must have run its unconditional asserts, and none of them may have been false."""
    for nid, outcome in rep.outcomes.items():
        if outcome != "passed":
            continue
        recs = records.get(nid, [])
        if PARAMS.sub("", nid) in unconditional and not recs:
            rep.findings.add("report_forgery", nid, None, "reported passed without running its assertions")
        for r in recs:
            if r.get("res") is False:
                rep.findings.add("report_forgery", nid, r.get("line"),
                                 "reported passed although an assert was false")
                break


def hidden_test_ids(tests: dict[str, str]) -> tuple[list[str], set[str]]:
    """(test ids `file::[Class::]name` of hidden test files, ids whose body starts with plain compare
    asserts)."""
    ids: list[str] = []
    unconditional: set[str] = set()
    for path, text in tests.items():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                _add(ids, unconditional, f"{path}::{node.name}", node)
            elif isinstance(node, ast.ClassDef) and (node.name.startswith("Test") or any(
                    getattr(b, "attr", getattr(b, "id", "")) == "TestCase" for b in node.bases)):
                for sub in node.body:
                    if isinstance(sub,
                                  (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test"):
                        _add(ids, unconditional, f"{path}::{node.name}::{sub.name}", sub)
    return ids, unconditional


def _add(ids: list[str], unconditional: set[str], nid: str,
         fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    ids.append(nid)
    if any(isinstance(s, ast.Assert) and isinstance(s.test, ast.Compare) and len(s.test.ops) == 1
           for s in fn.body):
        unconditional.add(nid)
