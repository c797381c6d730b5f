"""Final-answer extraction shared by the answer verifiers: drop the reasoning, find the one marked answer.

The convention every single-turn domain documents in its prompt: reasoning may come first (inside
`<think>...</think>` or as plain text), and the final answer goes inside `<answer>...</answer>`. Without
answer tags, a verifier chooses a fallback (the last `\\boxed{}` for math, the whole remaining text for strict
exact-match domains). Two or more *different* marked answers are a hedge and yield no answer at all, so
"the right answer among wrong ones" never counts.

Also the other ways an answer becomes verifiable material: a fenced code block, an answer laid into a
template, a JSON document.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["MAX_JSON_ANSWER_CHARS", "Fallback", "FinalAnswer", "apply_template", "boxed_contents",
           "code_from_answer",
           "extract_answer", "extract_script", "fenced_block", "normalize_text", "parse_json_answer",
           "strip_reasoning",
           "tagged"]


class Fallback(str, Enum):
    """Where the answer is taken from when the text has no answer tags."""

    whole = "whole"
    """The whole text left after removing the reasoning (strict: any extra words make it wrong)."""
    boxed = "boxed"
    """The last `\\boxed{...}` (one distinct value), else the last non-empty line."""
    none = "none"
    """No tags, no answer."""


THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
ANSWER_OPEN = re.compile(r"</?answer>", re.IGNORECASE)

@dataclass(frozen=True)
class FinalAnswer:
    """The answer found in a response, or why there is none."""

    text: str | None
    """The extracted answer (stripped), or None."""
    how: str
    """Where it came from: tag, boxed, last_line, whole, or none."""
    problem: str = ""
    """Why no answer was found (empty when `text` is set)."""


def strip_reasoning(text: str) -> str:
    """Remove `<think>` blocks; an unclosed `<think>` hides everything after it, and a lone `</think>`
    (a template that opened the block in the prompt) hides everything before it."""
    text = THINK_BLOCK.sub("", text)
    closes = list(THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = THINK_OPEN.search(text)
    if opened:
        text = text[:opened.start()]
    return text


def _distinct(values: list[str]) -> list[str]:
    return list(dict.fromkeys(" ".join(v.split()) for v in values))


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}`, braces balanced."""
    found: list[str] = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append(text[m.end():i - 1].strip())
    return found


def extract_answer(response: str | None, fallback: Fallback = Fallback.whole) -> FinalAnswer:
    """The single final answer of `response` (see the module docstring for the convention)."""
    if response is None or not response.strip():
        return FinalAnswer(None, "none", "empty response")
    body = strip_reasoning(response)
    tagged = ANSWER_TAG.findall(body)
    if tagged:
        distinct = _distinct([t.strip() for t in tagged])
        if len(distinct) > 1:
            return FinalAnswer(None, "tag", f"{len(distinct)} different answers marked")
        value = tagged[-1].strip()
        if ANSWER_OPEN.search(value):
            return FinalAnswer(None, "tag", "nested answer tags")
        return FinalAnswer(value or None, "tag", "" if value else "empty answer tag")
    if ANSWER_OPEN.search(body):
        return FinalAnswer(None, "tag", "unbalanced answer tag")
    if fallback is Fallback.none:
        return FinalAnswer(None, "none", "no <answer> tag")
    if fallback is Fallback.boxed:
        boxed = boxed_contents(body)
        if boxed:
            distinct = _distinct(boxed)
            if len(distinct) > 1:
                return FinalAnswer(None, "boxed", f"{len(distinct)} different boxed answers")
            return FinalAnswer(boxed[-1] or None, "boxed", "" if boxed[-1] else "empty box")
        lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
        if not lines:
            return FinalAnswer(None, "none", "no answer after the reasoning")
        return FinalAnswer(lines[-1], "last_line")
    value = body.strip()
    return FinalAnswer(value or None, "whole", "" if value else "no answer after the reasoning")


def normalize_text(text: str) -> str:
    """Whitespace-insensitive form for exact comparison: trailing spaces and blank edges dropped, runs of
    spaces inside a line collapsed; line structure (grids, matrices) kept."""
    lines = [" ".join(ln.split()) for ln in text.strip().splitlines()]
    return "\n".join(lines).strip()


def tagged(answer: str) -> str:
    """`answer` wrapped in the answer tags (gold final states and controls)."""
    return f"<answer>{answer}</answer>"


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


MAX_JSON_ANSWER_CHARS = 200_000
"""The longest JSON answer `parse_json_answer` parses."""


def parse_json_answer(response: str | None) -> tuple[Any, str]:
    """(the JSON value of the single marked answer, "") or (None, why not)."""
    found = extract_answer(response, Fallback.whole)
    if found.text is None:
        return None, found.problem
    if len(found.text) > MAX_JSON_ANSWER_CHARS:
        return None, f"answer longer than {MAX_JSON_ANSWER_CHARS} characters"
    text = found.text.strip()
    if text.startswith("```"):  # a fenced block inside the tags is still one JSON document
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text), ""
    except (ValueError, RecursionError) as exc:  # ValueError also covers integers over the digit limit
        return None, f"not valid JSON: {exc}"


SCRIPT_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_script(response: str | None) -> tuple[str | None, str]:
    """(the script inside the answer tags, optionally fenced; or the last fenced block), or (None, why)."""
    found = extract_answer(response, Fallback.none)
    if found.text is not None:
        blocks = SCRIPT_FENCE.findall(found.text)
        return (blocks[-1] if blocks else found.text), ""
    if found.problem != "no <answer> tag":
        return None, found.problem
    blocks = SCRIPT_FENCE.findall(response or "")
    return (blocks[-1], "") if blocks else (None, "no script in <answer> tags or a ```python block")
