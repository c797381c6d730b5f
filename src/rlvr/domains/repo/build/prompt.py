"""The issue a built task shows the model: what misbehaves, told from the failing tests by name and by the
kind of failure, never quoting a test's code or its expected values."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.domains.repo.build.generators import Candidate

MAX_LISTED = 10


def _test_name(tid: str) -> str:
    """`tests/test_x.py::TestY::test_z` -> `TestY.test_z` (in tests/test_x.py)."""
    path, _, name = tid.partition("::")
    return f"`{name.replace('::', '.')}` in `{path}`"


def describe(project: str, cand: Candidate, f2p: list[str], errors: dict[str, str],
             test_files: list[str]) -> str:
    """The prompt of one task."""
    listed = "\n".join(f"  - {_test_name(t)}" + (f" ({errors[t]})" if errors.get(t) else "")
                       for t in f2p[:MAX_LISTED])
    more = f"\n  - ... and {len(f2p) - MAX_LISTED} more" if len(f2p) > MAX_LISTED else ""
    head = f"You are working in a checkout of the Python project `{project}`.\n\n"
    if cand.generator == "implement":
        body = (f"The function `{cand.function}` in `{cand.file}` has no implementation yet: its "
                f"body is just `pass`. Implement it as its docstring and the rest of the package describe. "
                f"These tests cover it and fail now:\n{listed}{more}\n")
    else:
        body = (f"Since a recent change, {len(f2p)} test{'s' if len(f2p) != 1 else ''} of the project "
                f"fail{'' if len(f2p) != 1 else 's'}:\n{listed}{more}\n\nFind the cause in the "
                f"package's source "
                "(not in the tests) and fix it.\n")
    return head + body + _commands(f2p, test_files)


def _commands(f2p: list[str], test_files: list[str]) -> str:
    """How to run the tests that matter: every file with a failing test by name (wherever it sorts among the
    suite's files), then the whole judged suite."""
    failing = list(dict.fromkeys(t.partition("::")[0] for t in f2p))
    rest = [f for f in test_files if f not in failing]
    whole = (f" and the whole suite that must keep passing with `python -m pytest -q {' '.join(test_files)}`"
             if rest else "")
    return ("\nDo not edit the tests or the test configuration; every other test must keep passing. Run the "
            f"failing tests with `python -m pytest -q {' '.join(failing)}`{whole}.\n")
