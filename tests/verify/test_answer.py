"""Final-answer extraction and the exact `answer` verifier."""
from __future__ import annotations

import pytest

from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.answer import (
    ExactAnswerVerifier,
    Fallback,
    boxed_contents,
    extract_answer,
    normalize_text,
    strip_reasoning,
)
from rlvr.verify.base import VerifyContext


def test_think_blocks_are_dropped_closed_unclosed_and_template_opened() -> None:
    assert strip_reasoning("<think>maybe 3</think>4") == "4"
    assert strip_reasoning("answer 4 <think>and then I kept thinking <answer>5</answer>") == "answer 4 "
    assert strip_reasoning("reasoning opened by the template </think> 7") == " 7"


def test_tagged_answer_wins_over_reasoning() -> None:
    found = extract_answer("<think><answer>3</answer></think> so <answer> 4 </answer>")
    assert (found.text, found.how) == ("4", "tag")


@pytest.mark.parametrize("text", ["<answer>3</answer><answer>4</answer>", "\\boxed{3} or \\boxed{4}"])
def test_two_different_answers_are_a_hedge_and_give_nothing(text: str) -> None:
    found = extract_answer(text, Fallback.boxed)
    assert found.text is None and "different" in found.problem


def test_repeating_the_same_answer_is_not_a_hedge() -> None:
    assert extract_answer("<answer>4</answer> again <answer>4 </answer>").text == "4"


@pytest.mark.parametrize("text", ["", "   ", None, "<think>only thinking</think>", "<answer></answer>",
                                  "<answer>4", "<answer><answer>4</answer></answer>"])
def test_no_answer(text: str | None) -> None:
    assert extract_answer(text).text is None


def test_fallbacks() -> None:
    assert extract_answer("so x is \\boxed{\\frac{1}{2}}.", Fallback.boxed).text == "\\frac{1}{2}"
    assert extract_answer("work\n\n  42  \n", Fallback.boxed).text == "42"
    assert extract_answer("The answer is 42", Fallback.whole).text == "The answer is 42"
    assert extract_answer("42", Fallback.none).text is None
    assert boxed_contents("\\boxed{\\{1,2\\}} \\boxed{unclosed") == ["\\{1,2\\}"]


def test_normalize_keeps_lines_but_not_spacing() -> None:
    assert normalize_text("  1   2 \n3 4  \n\n") == "1 2\n3 4"
    assert normalize_text("1 2 3 4") != normalize_text("1 2\n3 4")


def _task(answer: str, **verifier: object) -> Task:
    return Task(id="t", domain="custom", prompt="What is 6*7?", answer=answer, verifier={"kind": "answer", **verifier})


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
    assert v.verify(_task("Paris", case_sensitive=False), FinalState(answer="<answer>paris</answer>")).score == 1.0


def test_the_domain_guide_in_the_docs_runs_and_proves_itself() -> None:
    """docs/DOMAINS.md's example domain is real code: register it, sample it, prove its verifier."""
    import re
    from pathlib import Path

    from rlvr.tasks import registry
    from rlvr.verify import base
    from rlvr.verify.proof import prove

    doc = (Path(__file__).parents[2] / "docs" / "DOMAINS.md").read_text(encoding="utf-8")
    code = next(b for b in re.findall(r"```python\n(.*?)```", doc, re.DOTALL) if "def setup()" in b)
    namespace: dict[str, object] = {}
    exec(compile(code, "DOMAINS.md", "exec"), namespace)  # noqa: S102  (our own documentation)
    try:
        namespace["setup"]()  # type: ignore[operator]
        src = registry.make("reverse", seed=1)
        tasks = src.sample(5)
        assert tasks == registry.make("reverse", seed=1).sample(5)
        for task in tasks:
            results = prove(task)
            assert results and all(r.ok for r in results), results
    finally:
        registry.unregister("reverse")
        base._VERIFIERS.pop("reverse", None)


def _double(x: int) -> int:
    return 2 * x


def _allocate() -> bytearray:
    return bytearray(8 << 30)


def _spin() -> None:
    while True:
        pass


def _raise() -> None:
    raise ValueError("bad input")


def test_guarded_runs_work_in_a_limited_child() -> None:
    from rlvr.verify.answer import guarded

    assert guarded(_double, 21) == (True, 42)
    done, why = guarded(_allocate, memory_mb=256)
    assert not done and "MemoryError" in str(why)
    done, why = guarded(_spin, timeout_s=0.5)
    assert not done and "longer than" in str(why)
    assert guarded(_raise) == (False, "ValueError: bad input")
