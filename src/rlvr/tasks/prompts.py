"""Prompt conventions shared by the single-turn answer domains."""
from __future__ import annotations

ANSWER_INSTRUCTION = ("Think as long as you need (reasoning may go inside <think></think>), then "
                      "give only the final answer inside <answer></answer> tags, for example "
                      "<answer>42</answer>.")
"""The sentence every answer-domain prompt ends with; `rlvr.verify.extract` reads answers by this
convention."""

JSON_INSTRUCTION = ("Answer with one JSON object inside <answer></answer> tags and nothing else "
                    "inside the tags (reasoning may come before, inside <think></think>).")
"""The closing sentence of domains whose answer is a JSON document."""


def with_instruction(question: str, instruction: str = ANSWER_INSTRUCTION) -> str:
    """`question` followed by a blank line and the answer convention."""
    return f"{question.rstrip()}\n\n{instruction}"


def fenced(script: str) -> str:
    """A script as the model is asked to give it."""
    return f"<answer>\n```python\n{script}```\n</answer>"
