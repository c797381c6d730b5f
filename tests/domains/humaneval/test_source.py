"""The humaneval domain: the package's 164 problems, hidden tests from check(), gold 1.0 and controls 0 under
real pytest, partial credit per check statement, helpers bound from the pristine prompt, bad input."""
from __future__ import annotations

import ast

import pytest

from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState
from tests.domains.code.codecheck import scores


def test_all_164_problems_load_with_parseable_hidden_tests() -> None:
    src = registry.make("humaneval")
    assert src.size == 164
    ids = list(src.ids())
    assert ids[0] == "HumanEval-0" and len(set(ids)) == 164
    for t in src:
        ast.parse(t.hidden["test_humaneval.py"])
        ast.parse(t.verifier["answer_template"].replace("{answer}", t.answer))
        assert t.hidden["test_humaneval.py"].count("\ndef test_check_") >= 1
        assert f"def {t.metadata['entry_point']}(" in t.prompt and t.prompt.startswith("Complete")


def test_determinism_by_index() -> None:
    a, b = registry.make("humaneval"), registry.make("humaneval")
    assert a.get(7).model_dump() == b.get(7).model_dump()
    assert a.find("HumanEval-7") == a.get(7)


def test_gold_one_and_controls_zero_under_pytest() -> None:
    src = registry.make("humaneval")
    cases, labels = [], []
    for i in (0, 32, 33, 38):  # 32/33/38: check() calls prompt helpers and the entry point by name
        t = src.get(i)
        cases.append((t, src.gold(t)))
        labels.append(f"{t.id}/gold")
        for name, final in src.negatives(t).items():
            cases.append((t, final))
            labels.append(f"{t.id}/{name}")
    assert {"empty_answer", "echoed_prompt", "wrong_answer",
            "buried_answer"} <= {x.split("/")[1] for x in labels}
    got = scores(cases)
    assert [(lab, s) for lab, s in zip(labels, got) if s != (1.0 if lab.endswith("gold") else 0.0)] == []


def test_partial_credit_and_pristine_helpers() -> None:
    src = registry.make("humaneval")
    palindrome = src.get(10)  # checks '', 'x', 'xyz', 'xyx', 'jerry': echoing the string passes three
    echo = FinalState(answer="def make_palindrome(string: str) -> str:\n    return string\n")
    # a candidate that redefines the prompt's helper poly() so that any x looks like a root
    cheat = FinalState(answer="def poly(xs, x):\n    return 0\n\n\ndef find_zero(xs):\n    return 0.0\n")
    got = scores([(palindrome, echo), (src.get(32), cheat)])
    assert got == [pytest.approx(3 / 5), 0.0]


def test_bad_index_and_config_are_user_errors() -> None:
    with pytest.raises(UserError, match="humaneval:0"):
        registry.make("humaneval").get(164)
    with pytest.raises(UserError, match="humaneval"):
        registry.make("humaneval", split="test")
