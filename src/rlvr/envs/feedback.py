"""What the environment says back to an answer of an attempts task (`Task.attempts`): the domain's check of
the answer on the task's visible cases (`Check`), and the message the model reads before its next attempt.

This is the seed's loop in its smallest form: the model writes an attempt, the visible cases run, the model
reads what failed (the call, the result expected, what it got) and writes another attempt, until one passes or
the budget of attempts is spent; the hidden cases then judge the last one. Two forms of the message
(`rollout.feedback`): `cases` says what failed; `blank` says only that it was wrong, the control that tells a
model which learned to use what failed from one which learned only to try again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FeedbackMode = Literal["cases", "blank"]
BLANK = "wrong"
"""The whole message under `rollout.feedback = "blank"`."""
MAX_FAILURES = 3
"""Failed cases said back at most (the rest are counted), so that feedback cannot crowd out the context."""


@dataclass(frozen=True)
class Failure:
    """One visible case the answer got wrong."""

    call: str
    """The case's call as the model would write it, e.g. `f([2,5,1])`."""
    expected: str
    """The expected result, as a literal."""
    got: str
    """What the answer did: `returned 2`, `raised IndexError`, `timed out`."""


@dataclass(frozen=True)
class Check:
    """The domain's check of one answer on the task's visible cases."""

    passed: bool
    """Every visible case gave the expected result."""
    failures: tuple[Failure, ...] = ()
    """The cases it got wrong, in the task's order."""
    error: str = ""
    """Why no case could run (the answer does not compile), said back in place of the failures."""


def message(check: Check, mode: FeedbackMode = "cases") -> str:
    """The message the model reads after a failed attempt: what failed, one case a line (`f([2,5])=5
    expected, returned 2`), or only that it was wrong (`blank`)."""
    if mode == "blank":
        return BLANK
    if check.error:
        return check.error
    # the expected result right after the call, as a prompt's examples are written (`f([1,2])=2`)
    lines = [f"{f.call}={f.expected} expected, {f.got}" for f in check.failures[:MAX_FAILURES]]
    rest = len(check.failures) - MAX_FAILURES
    if rest > 0:
        lines.append(f"(and {rest} more failed)")
    return "\n".join(lines) or BLANK
