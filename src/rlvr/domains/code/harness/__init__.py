"""The trusted pytest harness that the code verifier copies from the pristine package into each sandbox.

The scripts that run inside the sandbox live in `judge/` (not a package: they import each other by their
sandbox names, `_rlvr_values` and `_rlvr_worker`, and are never imported as rlvr modules).
"""
from __future__ import annotations

import importlib.util
import marshal
import sys
from functools import cache
from pathlib import Path

SUPERVISOR = "_rlvr_supervisor.py"
"""Name of the supervisor script inside the judge directory."""
WORKER = "_rlvr_worker.py"
"""Name of the worker script inside the judge directory."""
VALUES = "_rlvr_values.py"
"""Name of the shared plain-value codec inside the judge directory."""
GUARDS = "_rlvr_guards.py"
"""Name of the worker's clock, network and fork guards inside the judge directory."""
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
        VALUES: (here.parents[2] / "verify" / "values.py").read_text(encoding="utf-8"),
        GUARDS: (here / "judge" / "guards.py").read_text(encoding="utf-8"),
        CASES: (here / "judge" / "cases.py").read_text(encoding="utf-8"),
        PYTEST_INI: "[pytest]\n",
    }


@cache
def harness_bytecode() -> dict[str, bytes]:
    """The imported harness modules (worker, value codec, guards) precompiled, as judge-directory
    `__pycache__` files.

    Each is an unchecked hash-based pyc (PEP 552) of the very source `harness_files` ships, so the sandbox's
    interpreter (the same Python) loads it without compiling the source again: the worker alone costs several
    ms of CPU per verification to compile. An interpreter with another cache tag or magic number ignores the
    file and compiles the source, with the same result.
    """
    out: dict[str, bytes] = {}
    tag = sys.implementation.cache_tag
    if tag is None:
        return out
    for name in (WORKER, VALUES, GUARDS):
        source = harness_files()[name].encode("utf-8")
        code = compile(source, name, "exec", dont_inherit=True)
        header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4,
                                                               "little") + importlib.util.source_hash(source)
        out[f"__pycache__/{name.removesuffix('.py')}.{tag}.pyc"] = header + marshal.dumps(code)
    return out
