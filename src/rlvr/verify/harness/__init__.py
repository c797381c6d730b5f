"""The trusted pytest harness that the code verifier copies from the pristine package into each sandbox.

The scripts that run inside the sandbox live in `judge/` (not a package: they import each other by their
sandbox names, `_rlvr_values` and `_rlvr_worker`, and are never imported as rlvr modules).
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

SUPERVISOR = "_rlvr_supervisor.py"
"""Name of the supervisor script inside the judge directory."""
WORKER = "_rlvr_worker.py"
"""Name of the worker script inside the judge directory."""
VALUES = "_rlvr_values.py"
"""Name of the shared plain-value codec inside the judge directory."""
CASES = "_rlvr_cases.py"
"""Name of the trusted case drawer (run without the candidate's code)."""
PYTEST_INI = "_rlvr_pytest.ini"
"""An empty pytest config, so that no configuration file of the candidate's is ever read."""
RESULT_MARK = "RLVR-RESULT"
"""Prefix of the supervisor's signed result line."""


@cache
def harness_files() -> dict[str, str]:
    """The harness as judge-directory files, read from this installed package (never from a workspace)."""
    here = Path(__file__).parent
    return {
        SUPERVISOR: (here / "judge" / "supervisor.py").read_text(encoding="utf-8"),
        WORKER: (here / "judge" / "worker.py").read_text(encoding="utf-8"),
        VALUES: (here / "values.py").read_text(encoding="utf-8"),
        CASES: (here / "judge" / "cases.py").read_text(encoding="utf-8"),
        PYTEST_INI: "[pytest]\n",
    }
