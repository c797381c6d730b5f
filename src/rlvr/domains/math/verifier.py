"""Kind `math`: the single final answer must be mathematically equal to the reference (math-verify).

The answer is read by the shared convention (`<answer>` tags after any reasoning; without tags the last
`\\boxed{}`, else the last line). It is then parsed as *one* LaTeX expression, never searched for the last
number in it: "3 or 4" reads as the set {3, 4}, not as 4, so burying the right answer among wrong ones fails.
Scoring is binary; equivalent forms (`0.5`, `1/2`, `\\frac{1}{2}`; sets in any order; `x = 4`) count.
"""
from __future__ import annotations

import re
import threading
from typing import Any

from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.extract import Fallback, extract_answer, normalize_text
from rlvr.verify.guard import guarded
from rlvr.verify.parroting import answer_parroting
from rlvr.verify.verdict import Check, Flag, Verdict

MAX_ANSWER_CHARS = 1000
"""Longer final answers are refused unparsed (sympy on hostile input can take unbounded time and memory)."""
TIMEOUT_S = 5
"""math-verify's own parse/compare timeout (SIGALRM, so main thread only); the verifier also runs the whole
comparison in a guarded child process (`rlvr.verify.guard.guarded`) with a memory limit and a timeout."""


def _as_latex(text: str) -> str:
    text = text.strip()
    if text.startswith("$$") and text.endswith("$$") and len(text) > 4:
        text = text[2:-2]
    elif text.startswith("$") and text.endswith("$") and len(text) > 2:
        text = text[1:-1]
    elif text.startswith("\\(") and text.endswith("\\)"):
        text = text[2:-2]
    return f"${text.strip()}$"


def parse_expression(text: str) -> list[Any]:
    """math-verify's parse of `text` read as one expression (empty list when it does not parse)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    timeout = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    return parse(_as_latex(text), extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
                 parsing_timeout=timeout)  # type: ignore[arg-type]


SEGMENT_BREAK = re.compile(r"\n|\\\\|;|\s\|\s|\.\s+")
"""Where one statement ends and another begins: a newline, a LaTeX line break, a semicolon, a spaced bar, or a
full stop followed by a space (a decimal point never is). math-verify would keep only the last statement."""


def _same(g: list[Any], a: list[Any]) -> bool:
    from math_verify import verify

    timeout = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    return bool(g and a and verify(g, a, timeout_seconds=timeout))


def equivalent(gold: str, answer: str) -> bool:
    """True when `answer` is mathematically the reference `gold`. An answer made of several statements
    ("3. The answer is 4", "3 \\\\ 4") counts only when every statement in it is the reference."""
    g = parse_expression(gold)
    if not g:
        return False
    segments = [seg for seg in SEGMENT_BREAK.split(answer) if seg.strip(" .$")]
    if len(segments) > 1 and "\\begin" not in answer:
        return all(_same(g, parse_expression(seg)) for seg in segments)
    return _same(g, parse_expression(answer))


class MathVerifier:
    """Binary final-answer check with math-verify."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        if task.answer is None:
            return Verdict.infra(f"math task {task.key} has no reference answer")
        found = extract_answer(final.answer, Fallback.boxed)
        details: dict[str, Any] = {"extracted": found.text, "how": found.how}
        if found.text is None:
            return Verdict.from_checks([Check(name="answer", score=0.0, detail=found.problem)],
                                       details=details)
        if len(found.text) > MAX_ANSWER_CHARS:
            return Verdict.from_checks([Check(name="answer", score=0.0,
                                              detail=f"answer longer than {MAX_ANSWER_CHARS} characters")],
                                       details={**details, "extracted": found.text[:200]})
        flags: list[Flag] = []
        if normalize_text(found.text) == normalize_text(task.prompt):
            flags.append(Flag(kind="parroting", message="the answer repeats the prompt"))
        # sympy may blow up on hostile input
        done, result = guarded(equivalent, str(task.answer), found.text, warm=("math_verify",))
        ok = done and result is True
        if not done:
            details["problem"] = result
        if not ok:  # a wrong answer copied from the statement
            flags += answer_parroting(found.text, task.prompt, str(task.answer)).flags()
        check = Check(name="answer", score=float(ok), passed=ok,
                      detail="equal to the reference" if ok
                      else f"not equal to the reference {task.answer!s:.80}")
        return Verdict.from_checks([check], flags=flags, details=details)
