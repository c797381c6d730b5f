"""Reading the harness's result: signatures, protocol violations and cross-checks."""
from __future__ import annotations

import hashlib
import hmac
import json

from rlvr.domains.code.harness import RESULT_MARK
from rlvr.domains.code.harness.report import authenticate, hidden_test_ids, interpret

KEY = "ab" * 32


def line(payload: dict, key: str = KEY) -> str:
    text = json.dumps(payload)
    return f"{RESULT_MARK} {hmac.new(bytes.fromhex(key), text.encode(), hashlib.sha256).hexdigest()} {text}"


def test_only_the_signed_line_counts_and_forgeries_are_counted() -> None:
    good = {"messages": [{"t": "hello"}]}
    out = "\n".join([line({"messages": []}, "cd" * 32), "noise", line(good), f"{RESULT_MARK} 00 {{}}"]) + "\n"
    payload, forged = authenticate(out, KEY)
    assert payload == good and forged == 2
    assert authenticate("nothing", KEY) == (None, 0)


def test_a_result_line_cut_by_the_sandbox_is_no_forgery() -> None:
    """The supervisor ended mid-write (its deadline, under load): the cut line is not a forgery, and nothing
    counts; a whole signed line that only lost its newline still counts."""
    whole = line({"messages": [{"t": "hello"}]})
    assert authenticate("noise\n" + whole[:-40], KEY) == (None, 0)
    assert authenticate(whole, KEY) == ({"messages": [{"t": "hello"}]}, 0)
    assert authenticate(whole[:-40] + "\n", KEY) == (None, 1)  # a whole line that does not verify is forged


def run(messages: list[dict], exit_code: int | None = 0, unconditional: set[str] = frozenset(),
        **kw) -> object:
    return interpret({"messages": [{"t": "hello"}, *messages], "exit_code": exit_code, **kw},
                     set(unconditional))


COLLECT = {"t": "collected", "ids": ["t.py::a", "t.py::b"]}


def rep(nid: str, when: str, outcome: str) -> dict:
    return {"t": "report", "id": nid, "when": when, "outcome": outcome}


def test_outcomes_from_reports() -> None:
    r = run([COLLECT, rep("t.py::a", "setup", "passed"), rep("t.py::a", "call", "passed"),
             rep("t.py::b", "setup", "failed"), {"t": "end"}])
    assert r.outcomes == {"t.py::a": "passed", "t.py::b": "error"} and r.findings.evidence == {}


def test_protocol_violations_are_forgery() -> None:
    cases = [
        [COLLECT, rep("t.py::a", "call", "passed"), rep("t.py::a", "call", "passed"), {"t": "end"}],
        [COLLECT, rep("t.py::zzz", "call", "passed"), {"t": "end"}],
        [COLLECT, {"t": "end"}, rep("t.py::a", "call", "passed")],
        [COLLECT, COLLECT, {"t": "end"}],
        [{"t": "bogus"}, {"t": "end"}],
        [COLLECT, {"t": "cmp", "test": "t.py::a", "op": "==", "l": {"v": 1}, "r": {"v": 2}, "res": True},
         {"t": "end"}],
    ]
    for msgs in cases:
        assert "report_forgery" in run(msgs).findings.evidence, msgs
    assert "report_forgery" in interpret({"messages": [{"t": "end"}], "exit_code": 0},
                                         set()).findings.evidence
    assert "report_forgery" in run([{"t": "end"}], exit_code=70).findings.evidence


def sub(nid: str, outcome: str) -> dict:
    return {**rep(nid, "call", outcome), "sub": True, "detail": f"sub-test {outcome}"}


def test_sub_tests_can_fail_their_test_but_never_pass_it() -> None:
    passing = run([COLLECT, sub("t.py::a", "passed"), sub("t.py::a", "passed"),
                   rep("t.py::a", "call", "passed"),
                   {"t": "end"}])
    assert passing.outcomes == {"t.py::a": "passed"} and passing.findings.evidence == {}
    failing = run([COLLECT, sub("t.py::a", "passed"), sub("t.py::a", "failed"),
                   rep("t.py::a", "call", "passed"),
                   {"t": "end"}])
    assert failing.outcomes == {"t.py::a": "failed"} and failing.findings.evidence == {}
    assert failing.details["t.py::a"] == "sub-test failed"
    alone = run([COLLECT, sub("t.py::a", "passed"), {"t": "end"}])  # a sub-test alone reports nothing passed
    assert "t.py::a" not in alone.outcomes


def test_sub_test_reports_outside_their_test_are_forgery() -> None:
    for messages in ([COLLECT, sub("t.py::zzz", "passed")], [COLLECT, rep("t.py::a", "call", "passed"),
                                                            sub("t.py::a", "failed")]):
        assert run([*messages, {"t": "end"}]).findings.evidence.get("report_forgery"), messages


def test_passed_without_assertions_or_with_a_false_one_is_forgery() -> None:
    msgs = [COLLECT, rep("t.py::a", "call", "passed"), {"t": "end"}]
    assert "report_forgery" in run(msgs, unconditional={"t.py::a"}).findings.evidence
    false_cmp = {"t": "cmp", "test": "t.py::a", "op": "==", "l": None, "r": {"v": 2}, "res": False}
    assert "report_forgery" in run([COLLECT, false_cmp, *msgs[1:]]).findings.evidence


def test_early_exit_is_an_exit_trick_but_a_timeout_is_not() -> None:
    msgs = [COLLECT, rep("t.py::a", "call", "passed")]
    assert "exit_trick" in run(msgs, exit_code=0).findings.evidence
    assert run(msgs, exit_code=None, timed_out=True).findings.evidence == {}
    assert run(msgs, exit_code=None, signal=9, timed_out=True).findings.evidence == {}


def test_a_death_mid_suite_is_flagged_and_what_it_never_reported_fails() -> None:
    """A crash timed to keep partial credit (a segfault, SIGKILL, an abort after the passing tests
    reported)."""
    msgs = [COLLECT, rep("t.py::a", "call", "passed")]
    for sig in (6, 9, 11):
        r = run(msgs, exit_code=None, signal=sig)
        assert "exit_trick" in r.findings.evidence
        assert r.outcomes.get("t.py::a") == "passed" and "t.py::b" not in r.outcomes


def test_two_reports_for_one_phase_fail_the_test() -> None:
    """A report forged on the channel (from a thread of the candidate's) beside the real one: neither
    counts."""
    r = run([COLLECT, rep("t.py::a", "call", "passed"), rep("t.py::a", "call", "passed")])
    assert "report_forgery" in r.findings.evidence and r.outcomes["t.py::a"] == "error"


def test_test_functions_and_unconditional_asserts() -> None:
    src = ("import unittest\n\ndef test_a():\n    assert f() == 1\n\ndef test_b():\n    if x:\n        "
           "assert f() == 2\n\n"
           "class TestC:\n    def test_c(self):\n        assert 1 == 1\n\nclass D(unittest.TestCase):\n"
           "    def test_d(self):\n        self.assertEqual(1, 1)\n\ndef helper():\n    pass\n")
    ids, unconditional = hidden_test_ids({"t.py": src, "bad.py": "def (:"})
    assert ids == ["t.py::test_a", "t.py::test_b", "t.py::TestC::test_c", "t.py::D::test_d"]
    assert unconditional == {"t.py::test_a", "t.py::TestC::test_c"}
