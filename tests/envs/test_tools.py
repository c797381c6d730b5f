"""Every tool in a real workspace, including bad patches, bad arguments and unknown tools."""
from __future__ import annotations

import pytest

from rlvr.envs.tools import TOOLS, ToolContext, call_tool, cap
from rlvr.errors import InfraError
from rlvr.sandbox.result import ExecLimits
from rlvr.tasks.spec import Task

WORKSPACE = {"sol.py": "def add(a, b):\n    return a - b\n",
             "test_sol.py": "from sol import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
             "pkg/data.txt": "hello\n"}
FIX = "--- a/sol.py\n+++ b/sol.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
TASK = Task(id="t", domain="toy", prompt="fix add", workspace=WORKSPACE)


@pytest.fixture
def ctx(pool):
    with pool.lease(WORKSPACE) as sb:
        yield ToolContext(sb, TASK, ExecLimits(timeout_s=10), max_output_chars=2000)


def test_list_and_read(ctx) -> None:
    assert call_tool("list_files", ctx, {}).content.split() == ["pkg/data.txt", "sol.py", "test_sol.py"]
    assert call_tool("list_files", ctx, {"pattern": "pkg/*"}).content == "pkg/data.txt"
    assert call_tool("read_file", ctx, {"path": "./pkg/data.txt"}).content == "hello\n"
    assert "does not exist" in call_tool("read_file", ctx, {"path": "nope.py"}).content


@pytest.mark.parametrize("args", [{"path": "../etc/passwd"}, {"path": "/etc/passwd"}, {"path": "a/../../x"}])
def test_paths_outside_the_workspace_are_refused(ctx, args) -> None:
    out = call_tool("read_file", ctx, args)
    assert out.content.startswith("error: read_file:") and "relative to the workspace" in out.content
    assert call_tool("write_file", ctx, {**args, "content": "x"}).content.startswith("error:")


def test_write_then_read(ctx) -> None:
    assert "wrote new/dir/x.py" in call_tool("write_file", ctx,
                                             {"path": "new/dir/x.py", "content": "X = 1\n"}).content
    assert call_tool("read_file", ctx, {"path": "new/dir/x.py"}).content == "X = 1\n"
    assert call_tool("write_file", ctx,
                     {"path": "pkg", "content": "x"}).content.startswith("error: write_file:")


@pytest.mark.parametrize("name, args, message", [
    ("read_file", {}, "missing argument 'path'"),
    ("write_file", {"path": "a.py", "content": 3}, "must be a string"),
    ("run", {"command": ["ls"]}, "must be a string"),
    ("rm_rf", {}, "unknown tool 'rm_rf'"),
])
def test_bad_calls_become_messages(ctx, name, args, message) -> None:
    assert message in call_tool(name, ctx, args).content


def test_run_reports_status_and_output(ctx) -> None:
    out = call_tool("run", ctx, {"command": "echo out; echo err >&2; exit 3"})
    assert out.exec_status == "exit_nonzero"
    assert (out.content.startswith("[exit_nonzero, exit code 3]") and "out" in out.content
            and "[stderr]\nerr" in out.content)


def test_run_tests_fail_patch_pass(ctx) -> None:
    before = call_tool("run_tests", ctx, {})
    assert (before.exec_status == "exit_nonzero" and "assert -1 == 3" in before.content
            and "1 failed" in before.content)
    bad = call_tool("apply_patch", ctx, {"patch": FIX.replace("return a - b", "return a * b")})
    assert bad.content.startswith("error: patch not applied: hunk 1 of sol.py does not apply")
    assert call_tool("apply_patch", ctx, {"patch": FIX}).content == "applied: patched sol.py"
    after = call_tool("run_tests", ctx, {})
    assert after.exec_status == "ok" and "1 passed" in after.content


def test_run_tests_shows_the_command_as_it_can_be_run(ctx) -> None:
    """The shown command is the one that ran, interpreter included (it read `$ -m pytest ...`)."""
    first = call_tool("run_tests", ctx, {}).content.splitlines()[0]
    assert first.startswith("$ python -m pytest -q ") and first.endswith("test_sol.py")


def test_patch_can_delete_files(ctx) -> None:
    out = call_tool("apply_patch", ctx,
                    {"patch": "--- a/pkg/data.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n"})
    assert out.content == "applied: deleted pkg/data.txt"
    assert "pkg/data.txt" not in call_tool("list_files", ctx, {}).content


def test_patch_cannot_escape_the_workspace(ctx) -> None:
    out = call_tool("apply_patch", ctx, {"patch": "--- /dev/null\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x = 1\n"})
    assert out.content.startswith("error: patch not applied")


def test_submit_and_output_cap(ctx) -> None:
    assert call_tool("submit", ctx, {"answer": 42}).submitted
    long = call_tool("run", ctx, {"command": "head -c 50000 /dev/zero | tr '\\0' x"})
    assert len(long.content) < 2200 and "characters cut" in long.content
    assert cap("abc", 10) == "abc"


def test_infra_error_raises(ctx) -> None:
    from rlvr.sandbox.result import ExecResult, ExecStatus

    ctx.sandbox.run = lambda *a, **k: ExecResult(status=ExecStatus.infra_error, error="dead")
    with pytest.raises(InfraError, match="dead"):
        call_tool("run", ctx, {"command": "true"})


def test_tool_specs_are_openai_functions() -> None:
    for tool in TOOLS.values():
        spec = tool.spec()
        assert spec["type"] == "function" and spec["function"]["name"] == tool.name
        assert spec["function"]["parameters"]["type"] == "object"


def test_tools_work_in_the_isolated_sandbox() -> None:
    from rlvr.sandbox import make_pool

    with make_pool(workers=1) as pool, pool.lease(WORKSPACE) as sb:
        c = ToolContext(sb, TASK, ExecLimits(timeout_s=10))
        assert call_tool("apply_patch", c, {"patch": FIX}).content == "applied: patched sol.py"
        assert call_tool("run_tests", c, {}).exec_status == "ok"
        deleted = call_tool("apply_patch", c,
                            {"patch": "--- a/pkg/data.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n"})
        assert deleted.content == "applied: deleted pkg/data.txt"
        assert "pkg/data.txt" not in call_tool("list_files", c, {}).content


def test_patch_and_listing_never_read_the_whole_workspace(ctx) -> None:
    seen: list = []
    real = ctx.sandbox.read_files
    ctx.sandbox.read_files = lambda paths=None: seen.append(paths) or real(paths)
    call_tool("write_file", ctx, {"path": "huge.bin.txt", "content": "x" * 100_000})
    assert "huge.bin.txt" in call_tool("list_files", ctx, {}).content
    assert call_tool("apply_patch", ctx, {"patch": FIX}).content == "applied: patched sol.py"
    assert seen == [["sol.py"]]


def test_run_respects_the_command_time_limit(pool) -> None:
    with pool.lease(WORKSPACE) as sb:
        c = ToolContext(sb, TASK, ExecLimits(timeout_s=0.3))
        out = call_tool("run", c, {"command": "sleep 5"})
        assert out.exec_status == "timeout" and out.content.startswith("[timeout")


def test_a_domains_own_tools_are_offered_to_its_tasks_only_and_never_shadow_a_built_in() -> None:
    from rlvr.envs.tools import Tool, ToolOutput, tools_for
    from rlvr.tasks import registry
    from rlvr.tasks.domain import Domain
    from rlvr.tasks.source import ListSource

    def echo(ctx, args):
        return ToolOutput("echo")

    own = Tool("shout", "Shout.", {"type": "object", "properties": {}}, echo)
    fake_run = Tool("run", "Not the real run.", {"type": "object", "properties": {}}, echo)
    registry.register(Domain("test-tools", lambda _cfg: ListSource([]), tools=(own,)))
    registry.register(Domain("test-shadow", lambda _cfg: ListSource([]), tools=(fake_run,)))
    try:
        assert tools_for(Task(id="a", domain="test-tools", prompt="p"))["shout"] is own
        assert "shout" not in tools_for(Task(id="b", domain="code", prompt="p"))
        with pytest.raises(ValueError,
                           match="'test-shadow' declares a tool named like a built-in one: 'run'"):
            tools_for(Task(id="c", domain="test-shadow", prompt="p"))
        assert tools_for(None) is TOOLS
    finally:
        registry.unregister("test-tools")
        registry.unregister("test-shadow")


def test_run_tests_runs_a_domains_own_test_command(pool) -> None:
    """A domain whose visible tests are not pytest's names its command (a C task's `make test`)."""
    from rlvr.tasks import registry
    from rlvr.tasks.domain import Domain, VerifierKind, VerifierSettings
    from rlvr.tasks.source import ListSource

    class Own(VerifierSettings):
        def test_command(self) -> list[str] | None:
            return ["sh", "-c", "echo own tests ran; exit 3"]

    registry.register(Domain("tools-own-tests", lambda cfg: ListSource([]),
                             verifiers={"tools-own-tests": VerifierKind(lambda ctx: None, Own)}))
    try:
        task = Task(id="t", domain="tools-own-tests", prompt="x", workspace=WORKSPACE)
        with pool.lease(WORKSPACE) as sb:
            out = call_tool("run_tests", ToolContext(sb, task, ExecLimits(timeout_s=10)), {})
    finally:
        registry.unregister("tools-own-tests")
    assert out.content.startswith("$ sh -c 'echo own tests ran; exit 3'") and "own tests ran" in out.content
    assert out.exec_status == "exit_nonzero" and "pytest" not in out.content


def test_list_files_leaves_a_repository_out(ctx) -> None:
    ctx.sandbox.run(["sh", "-c", "mkdir -p .git/objects && echo x > .git/HEAD && echo y > .gitignore"])
    assert call_tool("list_files", ctx, {}).content.split() == [".gitignore", "pkg/data.txt", "sol.py",
                                                               "test_sol.py"]
