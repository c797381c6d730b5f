"""The verifier kind `answer`, which belongs to no domain: the marked final answer must equal the task's
answer exactly. Registered through the `rlvr.verifiers` entry points (`KIND`), like any kind."""
from __future__ import annotations

from typing import Any

from rlvr.tasks.domain import VerifierKind, VerifierSettings
from rlvr.tasks.settings import settings_of
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.extract import Fallback, extract_answer, normalize_text
from rlvr.verify.parroting import answer_parroting
from rlvr.verify.verdict import Check, Verdict

__all__ = ["KIND", "AnswerSettings", "ExactAnswerVerifier"]


class AnswerSettings(VerifierSettings):
    """The `[verifier]` table of an exact-answer task (kind `answer`)."""

    fallback: Fallback = Fallback.whole
    """Where the answer is taken from when the response has no answer tags: whole, boxed or none."""
    case_sensitive: bool = True
    """Compare case-sensitively (false: casefolded on both sides)."""


class ExactAnswerVerifier:
    """Kind `answer`: the marked final answer must equal `task.answer` (whitespace-normalised, and
    case-insensitive when the task's `[verifier] case_sensitive = false`). Binary: 1.0 or 0. A wrong answer
    copied from the statement (a literal of the prompt, where the right answer is none) is flagged `parroting`
    (`rlvr.verify.parroting.answer_parroting`)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        s = settings_of(task, AnswerSettings)
        found = extract_answer(final.answer, s.fallback)
        if found.text is None:
            return Verdict.from_checks([Check(name="answer", score=0.0, detail=found.problem)],
                                       details={"extracted": None, "how": found.how})
        gold, seen = normalize_text(str(task.answer)), normalize_text(found.text)
        if not s.case_sensitive:
            gold, seen = gold.casefold(), seen.casefold()
        ok = gold == seen
        check = Check(name="answer", score=float(ok), passed=ok,
                      detail="exact match" if ok
                      else f"expected {str(task.answer)[:80]!r}, got {found.text[:80]!r}")
        flags = [] if ok else answer_parroting(found.text, task.prompt, str(task.answer)).flags()
        return Verdict.from_checks([check], flags=flags, details={"extracted": found.text, "how": found.how})


KIND = VerifierKind(ExactAnswerVerifier, AnswerSettings)
"""The `answer` kind, as the `rlvr.verifiers` entry point names it."""
