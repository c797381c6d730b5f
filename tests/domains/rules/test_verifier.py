"""The declarative check format: paths, operations, gates, partial credit, and bad declarations."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlvr.domains.rules.verifier import MISSING, OPS, RulesVerifier, parse_path, select
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext

VERIFIER = RulesVerifier(VerifyContext())


def _task(checks: list[dict[str, Any]]) -> Task:
    return Task(id="t", domain="rules", prompt="Decide.", verifier={"checks": checks})


def _verdict(checks: list[dict[str, Any]], answer: Any) -> Any:
    return VERIFIER.verify(_task(checks), FinalState(answer=f"<answer>{json.dumps(answer)}</answer>"))


def test_paths() -> None:
    doc = {"a": [{"b": 1}, {"b": 2}, {"c": 3}], "x": {"y-z": "v"}}
    assert parse_path("a[*].b") == ["a", "*", "b"]
    assert select(doc, "a[*].b") == [1, 2, MISSING]
    assert select(doc, "a[1].b") == [2] and select(doc, "a[9].b") == [MISSING]
    assert select(doc, "x.y-z") == ["v"] and select(doc, "") == [doc]
    assert select(doc, "x[*]") == [MISSING]
    with pytest.raises(ValueError):
        parse_path("a[__import__('os')]")


@pytest.mark.parametrize("check,good,bad", [
    ({"op": "equals", "path": "t", "value": 10.0, "tol": 0.01}, {"t": 10.004}, {"t": 10.02}),
    ({"op": "equals", "path": "t", "value": "yes"}, {"t": "yes"}, {"t": ["yes"]}),
    ({"op": "equals", "path": "t", "value": 1}, {"t": 1}, {"t": True}),
    ({"op": "one_of", "path": "t", "values": ["a", "b"]}, {"t": "b"}, {"t": "c"}),
    ({"op": "range", "path": "t[*]", "min": 0, "max": 5}, {"t": [0, 5]}, {"t": [0, 6]}),
    ({"op": "matches", "path": "t", "pattern": "[A-Z]{3}-\\d+"}, {"t": "ABC-12"}, {"t": "ABC-12 junk"}),
    ({"op": "keys", "path": "", "keys": ["t"]}, {"t": 1}, {"t": 1, "u": 2}),
    ({"op": "count", "path": "t[*]", "min": 2, "max": 2}, {"t": [1, 2]}, {"t": [1, 2, 3]}),
    ({"op": "unique", "path": "t[*]"}, {"t": [1, 2]}, {"t": [1, 1]}),
    ({"op": "each_in", "path": "t[*]", "values": [1, 2]}, {"t": [2, 1]}, {"t": [1, 3]}),
    ({"op": "covers", "path": "t[*]", "values": [1, 2], "exact": True}, {"t": [2, 1]}, {"t": [1, 2, 3]}),
    ({"op": "sum_equals", "path": "t[*]", "value": 3, "tol": 0}, {"t": [1, 2]}, {"t": [1, "2"]}),
    ({"op": "at_most_per", "path": "t[*]", "key": "w", "limit": 1}, {"t": [{"w": 1}, {"w": 2}]},
     {"t": [{"w": 1}, {"w": 1}]}),
    ({"op": "allowed", "path": "t[*]", "key": "s", "field": "w", "allowed": {"am": ["ana"]}},
     {"t": [{"s": "am", "w": "ana"}]}, {"t": [{"s": "am", "w": "ben"}]}),
])
def test_each_operation(check: dict[str, Any], good: Any, bad: Any) -> None:
    assert _verdict([check], good).score == 1.0
    assert _verdict([check], bad).score == 0.0


def test_every_operation_is_tested_above() -> None:
    assert set(OPS) == {"equals", "one_of", "range", "matches", "keys", "count", "unique", "each_in",
                        "covers",
                        "sum_equals", "at_most_per", "allowed"}


def test_partial_credit_by_weight_and_fraction() -> None:
    checks = [{"op": "equals", "path": "a", "value": 1, "weight": 3},
              {"op": "each_in", "path": "b[*]", "values": [1], "partial": True}]
    assert _verdict(checks, {"a": 1, "b": [1, 2]}).score == pytest.approx((3 + 0.5) / 4)
    assert _verdict(checks, {"a": 2, "b": [1, 1]}).score == pytest.approx(1 / 4)


def test_failed_gate_zeroes_the_score() -> None:
    checks = [{"op": "equals", "path": "a", "value": 1},
              {"op": "keys", "path": "", "keys": ["a"], "gate": True}]
    assert _verdict(checks, {"a": 1}).score == 1.0
    verdict = _verdict(checks, {"a": 1, "b": 1})
    assert verdict.score == 0.0 and not verdict.passed


def test_task_strings_are_data_never_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    checks = [{"op": "equals", "path": "a", "value": payload},
              {"op": "matches", "path": "a", "pattern": ".*"}]
    assert _verdict(checks, {"a": payload}).score == 1.0
    assert _verdict(checks, {"a": "x"}).score == 0.5
    assert not marker.exists()


@pytest.mark.parametrize("checks,match", [
    ([], "non-empty list of checks"), ([{"op": "eval", "path": "a"}], "unknown op 'eval'"),
    ([{"op": "equals", "path": "a[", "value": 1}], "bad path"), ([{"op": "equals", "pth": "a"}], "pth"),
    ([{"op": "matches", "path": "a", "pattern": "("}], "checks\\[0\\]"), ("equals", "non-empty list"),
    ([{"op": "equals", "weight": -1}], "weight"),
])
def test_bad_declarations_raise_user_errors(checks: Any, match: str) -> None:
    with pytest.raises(UserError, match=match):
        VERIFIER.verify(_task(checks), FinalState(answer="<answer>{}</answer>"))


def test_hand_written_task_directory(tmp_path: Path) -> None:
    d = tmp_path / "refund"
    d.mkdir()
    (d / "prompt.md").write_text("Refund 30% of 50 and say whether it needs approval (over 10).")
    (d / "task.toml").write_text('id = "refund"\ndomain = "rules"\n'
                                 '[[verifier.checks]]\nop = "equals"\npath = "refund"\nvalue = '
                                 '15.0\ntol = 0.01\n'
                                 '[[verifier.checks]]\nop = "equals"\npath = "needs_approval"\n'
                                 'value = true\n')
    task = load_task_dir(d)
    assert registry.verifier_kind(task.domain) == "rules"
    good = FinalState(answer='<answer>{"refund": 15, "needs_approval": true}</answer>')
    assert VERIFIER.verify(task, good).score == 1.0
    assert VERIFIER.verify(task, FinalState(answer='<answer>{"refund": 15}</answer>')).score == 0.5


def test_malformed_answers() -> None:
    checks = [{"op": "equals", "path": "a", "value": 1}]
    for response in ("", "Decide.", "<answer>{</answer>", "<answer>[1]</answer>", "<answer>NaN</answer>"):
        assert VERIFIER.verify(_task(checks), FinalState(answer=response)).score == 0.0
