"""Turning a single-turn answer into verifiable material: fenced code extraction and answer templates."""
from __future__ import annotations

import re

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
PLACEHOLDER = "{answer}"


def fenced_block(text: str, languages: tuple[str, ...] = ("python", "py", "python3")) -> str | None:
    """The body of the first fenced block tagged with one of `languages`, else of the first untagged one."""
    untagged = None
    for m in FENCE.finditer(text):
        lang = m.group(1).lower()
        if lang in languages:
            return m.group(2)
        if not lang and untagged is None:
            untagged = m.group(2)
    return untagged


def code_from_answer(answer: str | None) -> str:
    """The code of an answer: its first fenced Python block if it has one, else the raw text."""
    if not answer:
        return ""
    block = fenced_block(answer)
    return block if block is not None else answer


def apply_template(template: str, answer: str) -> str:
    """Lay `answer` into `template` at `{answer}` (plain replacement, so braces in code stay as they are)."""
    return template.replace(PLACEHOLDER, answer)
