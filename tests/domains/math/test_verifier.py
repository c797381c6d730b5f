"""math-verify based scoring: equivalent forms count, hedges and buried answers do not."""
from __future__ import annotations

import pytest

from rlvr.domains.math.verifier import MAX_ANSWER_CHARS, MathVerifier, equivalent
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext

VERIFIER = MathVerifier(VerifyContext())


def _score(gold: str, response: str) -> float:
    task = Task(id="t", domain="math", prompt="Compute it.", answer=gold)
    return VERIFIER.verify(task, FinalState(answer=response)).score


@pytest.mark.parametrize("gold,answer", [
    ("\\frac{1}{2}", "0.5"), ("\\frac{1}{2}", "1/2"), ("\\{1, 2\\}", "\\{2, 1\\}"), ("[1, 2)", "[1,2)"),
    ("6\\sqrt{2}", "\\sqrt{72}"), ("4", "x = 4"), ("4", "The answer is 4"), ("4", "4."), ("4", "4 \\\\ 4"),
    ("x^2 + 4x + 4", "(x+2)^2"), ("4", "$4$"), ("9\\pi", "9 \\pi"),
])
def test_equivalent_forms(gold: str, answer: str) -> None:
    assert equivalent(gold, answer)


@pytest.mark.parametrize("gold,answer", [
    ("4", "3 or 4"), ("4", "3, 4, 5"), ("4", "The answer is 3. The answer is 4"), ("4", "3 \\\\ 4"),
    ("4", "3 | 4"),
    ("4", "3; 4"), ("[1, 2)", "(1, 2)"), ("\\{1, 2\\}", "\\{1\\}"),
    ("4", "4 \\text{ or } 5"), ("\\frac{1}{3}", "0.33"),
])
def test_not_equivalent(gold: str, answer: str) -> None:
    assert not equivalent(gold, answer)


def test_reasoning_then_answer() -> None:
    assert _score("4", "<think>2+2 is 4, or is it 5?</think>\n<answer>4</answer>") == 1.0
    assert _score("4", "Two plus two makes four.\n\\boxed{4}") == 1.0
    assert _score("4", "Two plus two\n4") == 1.0


@pytest.mark.parametrize("response", ["", "Compute it.", "<answer>5</answer>", "\\boxed{3} \\boxed{4}",
                                      "<answer>4</answer><answer>5</answer>", "<think>4",
                                      "<answer>four</answer>"])
def test_controls_score_zero(response: str) -> None:
    assert _score("4", response) == 0.0


def test_hostile_answers_are_refused_quickly() -> None:
    assert _score("4", "<answer>" + "9^" * MAX_ANSWER_CHARS + "9</answer>") == 0.0
    assert _score("4", "<answer>\\frac{1}{0}</answer>") == 0.0
    assert _score("4", "<answer>\\left( \\right.</answer>") == 0.0


def test_no_reference_is_an_infra_error_not_a_zero() -> None:
    task = Task(id="t", domain="math", prompt="?")
    verdict = VERIFIER.verify(task, FinalState(answer="4"))
    assert verdict.infra_error and verdict.score == 0.0


def test_power_tower_is_refused_without_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.verify import guard as answer

    monkeypatch.setattr(answer, "GUARD_TIMEOUT_S", 2.0)
    assert _score("4", "<answer>9^{9^{9^{9}}}</answer>") == 0.0
