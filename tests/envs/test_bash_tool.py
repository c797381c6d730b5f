"""The bash tool: one command in the episode's workspace, the sandbox interpreter's environment on PATH, the
usual limits, output capped and every cut marked."""
from __future__ import annotations

import os
import sys

import pytest

from rlvr.envs.tools import BASH, BASH_TRUNCATED, TOOLS, ToolContext, call_tool, tools_for
from rlvr.sandbox.result import ExecLimits
from rlvr.tasks.spec import Task, TaskLimits

WORKSPACE = {"pkg/mod.py": "X = 1\n", "notes.txt": "hello\n"}
TASK = Task(id="t", domain="repo-real", prompt="p", workspace=WORKSPACE)


@pytest.fixture(scope="module")
def isolated():
    from rlvr.sandbox.pool import BwrapPool

    with BwrapPool(workers=1, spares=0) as p:
        yield p


def _ctx(sb, **limits) -> ToolContext:
    return ToolContext(sb, TASK, ExecLimits(**{"timeout_s": 10, **limits}), max_output_chars=500)


def test_bash_runs_in_the_workspace_with_bash_syntax(isolated) -> None:
    with isolated.lease(WORKSPACE) as sb:
        out = call_tool("bash", _ctx(sb), {"command": "cat notes.txt; arr=(a b c); echo ${#arr[@]}; pwd"})
        assert out.exec_status == "ok"
        assert out.content.startswith("[ok, exit code 0]") and "hello\n3\n/workspace" in out.content
        out = call_tool("bash", _ctx(sb), {"command": "echo changed > notes.txt; exit 4"})
        assert out.exec_status == "exit_nonzero" and "exit code 4" in out.content
        # the workspace persists between calls
        assert sb.read_files(["notes.txt"])["notes.txt"] == "changed\n"


def test_the_environments_interpreter_is_first_on_path(isolated) -> None:
    with isolated.lease(WORKSPACE) as sb:
        out = call_tool("bash", _ctx(sb),
                        {"command": "python -c 'import sys, pkg.mod; print(sys.prefix, pkg.mod.X)'"})
        assert out.exec_status == "ok", out.content
        assert f"{sys.prefix} 1" in out.content or "/opt/rlvr/prefix 1" in out.content


def test_limits_apply(isolated) -> None:
    with isolated.lease(WORKSPACE) as sb:
        out = call_tool("bash", _ctx(sb, timeout_s=1), {"command": "sleep 5"})
        assert out.exec_status == "timeout" and out.content.startswith("[timeout")


def test_long_output_is_capped_and_both_cuts_are_marked(isolated) -> None:
    with isolated.lease(WORKSPACE) as sb:
        out = call_tool("bash", _ctx(sb, output_bytes=20_000),
                        {"command": "head -c 100000 /dev/zero | tr '\\\\0' x"})
        assert "characters cut" in out.content  # the tool's cap (head and tail kept)
        assert BASH_TRUNCATED.format(stream="stdout") in out.content  # the sandbox's own cap
        assert len(out.content) < 1000
        short = call_tool("bash", _ctx(sb), {"command": "echo hi"})
        assert "cut" not in short.content and "truncated" not in short.content


def test_bad_arguments_become_messages(isolated) -> None:
    with isolated.lease(WORKSPACE) as sb:
        assert "missing argument 'command'" in call_tool("bash", _ctx(sb), {}).content
        assert "must be a string" in call_tool("bash", _ctx(sb), {"command": ["ls"]}).content
    assert BASH.spec()["function"]["parameters"]["required"] == ["command"]


def test_only_repository_tasks_get_bash() -> None:
    for domain in ("repo", "repo-real"):
        assert tools_for(TASK.model_copy(update={"domain": domain}))["bash"] is BASH
    assert "bash" not in tools_for(Task(id="c", domain="code", prompt="p")) and "bash" not in TOOLS
    ctx = ToolContext(None, Task(id="c", domain="code", prompt="p"), ExecLimits())  # type: ignore[arg-type]
    out = call_tool("bash", ctx, {"command": "ls"})
    assert out.content.startswith("error: unknown tool 'bash'")


def test_no_network_from_bash(isolated) -> None:
    with isolated.lease(WORKSPACE) as sb:
        out = call_tool("bash", _ctx(sb),
                        {"command": "python -c \"import socket; "
                                    "socket.create_connection(('1.1.1.1', 80), 2)\""})
        assert out.exec_status == "exit_nonzero"
        assert os.environ.get("PATH") not in out.content


def test_a_src_layouts_import_roots_are_on_pythonpath_for_every_tool(isolated) -> None:
    files = {"src/pkg/__init__.py": "", "src/pkg/mod.py": "X = 2\n",
             "tests/test_mod.py": "from pkg.mod import X\n\n\ndef test_x():\n    assert X == 2\n"}
    task = Task(id="s", domain="repo-real", prompt="p", workspace=files,
                hidden={"test_h.py": "def test_h():\n    pass\n"},
                verifier={"kind": "code", "tests": ["test_h.py"], "import_roots": ["src"]})
    plain = task.model_copy(update={"verifier": {"kind": "code", "tests": ["test_h.py"]}})
    with isolated.lease(files) as sb:
        ctx = ToolContext(sb, task, ExecLimits(timeout_s=20), max_output_chars=2000)
        out = call_tool("bash", ctx,
                        {"command": "cd tests && python -c 'import pkg.mod as m; print(m.__file__, m.X)'"})
        assert out.exec_status == "ok" and "/src/pkg/mod.py 2" in out.content, out.content
        out = call_tool("run_tests", ctx, {})
        assert out.exec_status == "ok" and "1 passed" in out.content, out.content
        bare = ToolContext(sb, plain, ExecLimits(timeout_s=20), max_output_chars=2000)
        out = call_tool("bash", bare, {"command": "python -c 'import pkg.mod'"})
        # roots only when declared
        assert out.exec_status == "exit_nonzero" and "ModuleNotFoundError" in out.content


@pytest.mark.parametrize("root", ["../x", "/abs", ".", "a/../b", ""])
def test_import_roots_outside_the_workspace_are_refused(root) -> None:
    from rlvr.errors import UserError
    from rlvr.tasks.settings import checked

    task = Task(id="r", domain="repo", prompt="p", workspace={"a.py": ""}, hidden={"test_h.py": ""},
                verifier={"kind": "code", "tests": ["test_h.py"], "import_roots": [root]})
    with pytest.raises(UserError, match="import_roots"):
        checked(task)


def test_a_link_out_of_the_workspace_is_refused_and_the_model_told(isolated) -> None:
    """A symbolic link that stays inside the workspace is kept (and read as what it leads to); one that points
    out of it is removed after the command, named in the tool's output, and handed on as refused."""
    from rlvr.envs.env import Env
    from rlvr.envs.messages import Message, ToolCall

    env = Env(isolated)
    env.reset(TASK.model_copy(update={"limits": TaskLimits(max_turns=4, max_tokens=4000)}))
    try:
        step = env.step(Message(role="assistant", content="", tool_calls=[ToolCall(name="bash", arguments={
            "command": "echo fixed > /tmp/mod.py; ln -s /tmp/mod.py outside.py; ln -s ../../etc/passwd pw;"
                       " ln -s pkg/mod.py inside.py; ln -s /workspace/pkg alias; ln -s nowhere.py dangling."
                       "py"})]))
        out = step.messages[0].content
        assert "[refused: outside.py was a symbolic link to /tmp/mod.py" in out and "[refused: pw " in out
        assert "inside.py" not in out.split("[refused")[1] if "[refused" in out else True
        final = env.final_state()
    finally:
        env.close()
    assert final.refused == ["outside.py", "pw"]
    assert final.files["inside.py"] == "X = 1\n" and final.files["alias/mod.py"] == "X = 1\n"
    assert "outside.py" not in final.files and "pw" not in final.files and "dangling.py" not in final.files
