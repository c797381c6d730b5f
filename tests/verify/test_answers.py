"""Code answers of single-turn tasks: fenced block extraction and templates."""
from __future__ import annotations

from rlvr.verify.answers import apply_template, code_from_answer, fenced_block


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
    assert apply_template("import m\n{answer}\nd = {'k': {}}\n", "y = {}") == "import m\ny = {}\nd = {'k': {}}\n"
    assert apply_template("{answer}", "{answer} {0}") == "{answer} {0}"
