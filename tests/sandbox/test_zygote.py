"""Pure pieces of the in-sandbox worker: which `python` invocations run in the warm interpreter."""
from __future__ import annotations

import pytest

from rlvr.sandbox.zygote import python_fast_path


@pytest.mark.parametrize("args,expected", [
    (["-c", "print(1)", "a"], ("-c", "print(1)", ["a"])),
    (["-m", "pytest", "-q"], ("-m", "pytest", ["-q"])),
    (["script.py", "x"], ("script", "script.py", ["x"])),
    (["-u", "-c", "x"], None),
    (["-"], None),
    ([], None),
    (["-c"], None),
])
def test_fast_path_only_for_plain_invocations(args: list[str], expected: object) -> None:
    assert python_fast_path(args) == expected
