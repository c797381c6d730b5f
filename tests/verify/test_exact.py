"""The generic `answer` verifier kind: an exact final answer."""
from __future__ import annotations

from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.exact import ExactAnswerVerifier


def _task(answer: str, **verifier: object) -> Task:
    return Task(id="t", domain="custom", prompt="What is 6*7?", answer=answer,
                verifier={"kind": "answer", **verifier})


def test_exact_answer_verifier_gold_and_controls() -> None:
    v = ExactAnswerVerifier(VerifyContext())
    task = _task("42")
    assert v.verify(task, FinalState(answer="<think>6*7</think><answer>42</answer>")).score == 1.0
    for bad in ("", task.prompt, "<answer>41</answer>", "<answer>41 42 43</answer>",
                "<answer>41</answer><answer>42</answer>", "The answer is 42"):
        verdict = v.verify(task, FinalState(answer=bad))
        assert verdict.score == 0.0 and not verdict.passed, bad


def test_exact_answer_verifier_case_option() -> None:
    v = ExactAnswerVerifier(VerifyContext())
    assert v.verify(_task("Paris"), FinalState(answer="<answer>paris</answer>")).score == 0.0
    assert v.verify(_task("Paris", case_sensitive=False),
                    FinalState(answer="<answer>paris</answer>")).score == 1.0
