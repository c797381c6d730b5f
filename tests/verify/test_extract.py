"""Answer extraction: the final answer, fenced code, templates, JSON documents and scripts."""
from __future__ import annotations

import pytest

from rlvr.verify.extract import (
    Fallback,
    apply_template,
    boxed_contents,
    code_from_answer,
    extract_answer,
    fenced_block,
    normalize_text,
    strip_reasoning,
)


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




def test_first_python_block_wins_then_untagged_then_raw_text() -> None:
    text = "intro\n```text\nnot code\n```\n```python\ndef f():\n    return 1\n```\n```python\nsecond\n```"
    assert code_from_answer(text) == "def f():\n    return 1"
    assert code_from_answer("```\nx = 1\n```") == "x = 1"
    assert code_from_answer("x = {1: 2}") == "x = {1: 2}"
    assert code_from_answer(None) == "" and code_from_answer("") == ""


def test_unclosed_fence_takes_the_rest() -> None:
    assert fenced_block("```py\nx = 1\n") == "x = 1\n"
    assert fenced_block("no fences here") is None


def test_template_replaces_without_format() -> None:
    assert apply_template("import m\n{answer}\nd = {'k': {}}\n",
                          "y = {}") == "import m\ny = {}\nd = {'k': {}}\n"
    assert apply_template("{answer}", "{answer} {0}") == "{answer} {0}"
