"""The sql domain's trusted judge (`judge.py`, a standalone script run by the image's Python) as the verifier
copies it into the sandbox: read from this installed package, never from a workspace."""
from __future__ import annotations

from functools import cache
from pathlib import Path

JUDGE = "judge/judge.py"
"""Where the judge lies in the verification sandbox."""
MARK = "RLVR-SQL-RESULT"
"""Prefix of the judge's signed result line."""


@cache
def judge_source() -> str:
    return (Path(__file__).parent / "judge.py").read_text(encoding="utf-8")
