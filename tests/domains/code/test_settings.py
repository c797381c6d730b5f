"""The code verifier's settings: validated when a task loads, near misses answered, `visible_tests`
honoured."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.domains.code.settings import CodeSettings
from rlvr.envs.tools import ToolContext, call_tool
from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.result import ExecLimits
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.spec import FinalState
from rlvr.verify.base import VerifyContext, settings_of, verify
from tests.conftest import write_task

STUB = "def double(x):\n    return x\n"
FIXED = "def double(x):\n    return 2 * x\n"
HIDDEN = {"test_hidden.py": "from calc import double\n\n\ndef test_double():\n    assert double(21) == 42\n"}
WORKSPACE = {"calc.py": STUB,
             "checks/check_calc.py": "from calc import double\n\n\ndef test_visible():\n    assert "
                                     "double(2) == 4\n",
             "test_scratch.py": "def test_not_declared():\n    assert False, 'not a declared visible test'\n"}


def test_a_task_with_visible_tests_loads_runs_them_through_the_tool_and_verifies(tmp_path: Path,
                                                                                 pool: SandboxPool) -> None:
    toml = 'id = "calc"\ndomain = "code"\n[verifier]\nvisible_tests = ["checks/check_calc.py"]\n'
    task = load_task_dir(write_task(tmp_path, "calc", toml=toml, workspace=WORKSPACE, hidden=HIDDEN))
    assert settings_of(task, CodeSettings).visible_tests == ["checks/check_calc.py"]
    with pool.lease(task.workspace) as sb:
        ctx = ToolContext(sandbox=sb, task=task, limits=ExecLimits(timeout_s=30))
        before = call_tool("run_tests", ctx, {}).content
        assert "checks/check_calc.py" in before and "1 failed" in before
        assert "test_scratch.py" not in before  # only the declared visible tests run
        call_tool("write_file", ctx, {"path": "calc.py", "content": FIXED})
        after = call_tool("run_tests", ctx, {})
        assert after.exec_status == "ok" and "1 passed" in after.content
    verdict = verify(task, FinalState(files={**task.workspace, "calc.py": FIXED}), VerifyContext(pool=pool))
    assert verdict.passed and verdict.score == 1.0, verdict
    assert not verify(task, FinalState(files=dict(task.workspace)), VerifyContext(pool=pool)).passed


@pytest.mark.parametrize(("verifier", "needle"), [
    ('visible_tests = ["checks/nope.py"]',
     r"\[verifier\.visible_tests\]: 'checks/nope\.py' is not in the workspace"),
    ('visible_test = ["checks/check_calc.py"]',
     r"\[verifier\.visible_test\]: unknown field \(did you mean 'visible_tests'\?\)"),
    ('cases = { genrator = "g.py", reference = "r.py", entry = "calc:double" }',
     r"\[verifier\.cases\.genrator\]: unknown field \(did you mean 'generator'\?\)"),
    ('[[verifier.checks]]\nknd = "ruff"',
     r"\[verifier\.checks\[0\]\.knd\]: unknown field \(did you mean 'kind'\?\)"),
    ('tests_weight = "heavy"', r"\[verifier\.tests_weight\]: Input should be a valid number"),
])
def test_bad_settings_are_one_line_naming_the_file_the_key_and_the_fix(tmp_path: Path, verifier: str,
                                                                       needle: str) -> None:
    toml = f'id = "calc"\ndomain = "code"\n[verifier]\n{verifier}\n'
    d = write_task(tmp_path, "calc", toml=toml, workspace=WORKSPACE, hidden=HIDDEN)
    with pytest.raises(UserError, match=needle) as exc:
        load_task_dir(d)
    assert str(exc.value).startswith(str(d / "task.toml")) and "\n" not in str(exc.value)
