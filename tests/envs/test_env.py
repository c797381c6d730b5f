"""Env reset/step: tools through the text format, budgets as truncation, single-turn answers, infra
rebuilds."""
from __future__ import annotations

import json
import time

import pytest

from rlvr.envs.env import Env
from rlvr.envs.messages import Message, ToolCall
from rlvr.errors import InfraError
from rlvr.tasks.spec import Task, TaskLimits

from .conftest import FlakyPool

WS = {"sol.py": "def add(a, b):\n    return a - b\n"}


def multi(**limits) -> Task:
    return Task(id="m", domain="toy", prompt="fix add", workspace=WS,
                limits=TaskLimits(**{"max_turns": 5, "max_tokens": 1000, **limits}))


def call(name: str, **args) -> Message:
    return Message(role="assistant",
                   content=f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>")


def test_reset_gives_statement_and_tools(pool) -> None:
    with Env(pool) as env:
        obs = env.reset(multi())
        assert [m.role for m in obs.messages] == ["system", "user"]
        assert obs.messages[-1].content == "fix add" and "<tool_call>" in obs.messages[0].content
        assert {t["function"]["name"] for t in obs.tools} >= {"read_file", "apply_patch", "run_tests",
                                                              "submit"}


def test_tool_calls_run_and_submit_terminates(pool) -> None:
    with Env(pool) as env:
        env.reset(multi())
        res = env.step(call("write_file", path="sol.py", content="def add(a, b):\n    return a + b\n"), 10)
        assert not res.terminated and not res.truncated and res.messages[0].role == "tool"
        assert res.messages[0].name == "write_file"
        res = env.step(call("submit"), 5)
        assert res.terminated and not res.truncated
        assert env.final_state().files["sol.py"].endswith("a + b\n")


def test_native_calls_take_precedence(pool) -> None:
    with Env(pool) as env:
        env.reset(multi())
        res = env.step(Message(role="assistant", content="<tool_call>{bad</tool_call>",
                               tool_calls=[ToolCall(id="x1", name="read_file",
                                                    arguments={"path": "sol.py"})]))
        assert [m.tool_call_id for m in res.messages] == ["x1"] and "return a - b" in res.messages[0].content


def test_no_call_and_malformed_call_become_feedback(pool) -> None:
    with Env(pool) as env:
        env.reset(multi())
        res = env.step(Message(role="assistant", content="I think it is fine."))
        assert res.messages[0].role == "user" and "No tool call found" in res.messages[0].content
        res = env.step(Message(role="assistant",
                               content='<tool_call>{"name": "run", "arguments": {</tool_call>'))
        assert "not valid JSON" in res.messages[0].content and res.info["call_errors"] == 1


def test_turn_budget_truncates(pool) -> None:
    with Env(pool) as env:
        env.reset(multi(max_turns=2))
        assert not env.step(call("list_files")).truncated
        res = env.step(call("list_files"))
        assert res.truncated and res.truncated_by == "turns" and not res.terminated


def test_submit_on_the_last_turn_is_termination(pool) -> None:
    with Env(pool) as env:
        env.reset(multi(max_turns=2))
        env.step(call("list_files"))
        res = env.step(call("submit"))
        assert res.terminated and not res.truncated


def test_token_budget_truncates(pool) -> None:
    with Env(pool) as env:
        env.reset(multi(max_tokens=30))
        assert not env.step(call("list_files"), num_tokens=20).truncated
        assert env.step(call("list_files"), num_tokens=10).truncated_by == "tokens"


def test_wall_budget_truncates(pool) -> None:
    with Env(pool) as env:
        env.reset(multi(wall_s=0.05))
        time.sleep(0.06)
        assert env.step(call("list_files")).truncated_by == "wall"


def test_overrides_apply_to_multi_turn_only(pool) -> None:
    env = Env(pool, max_turns=1, max_tokens=7)
    env.reset(multi(max_turns=9))
    assert (env.budgets.max_turns, env.budgets.max_tokens, env.tool_mode) == (1, 7, True)
    env.close()
    single = Task(id="s", domain="toy", prompt="2+2?")
    env = Env(None, max_turns=5)
    env.reset(single)
    assert (env.budgets.max_turns, env.tool_mode) == (1, False)


def test_single_turn_answer_is_the_action() -> None:
    task = Task(id="s", domain="toy", prompt="2+2?", workspace={"stub.py": "x"})
    env = Env(None)
    obs = env.reset(task)
    assert [m.role for m in obs.messages] == ["user"] and obs.tools == []
    res = env.step(Message(role="assistant", content="<answer>4</answer>"), 5)
    assert res.terminated and env.final_state().answer == "<answer>4</answer>"
    assert env.final_state().files == {"stub.py": "x"}
    env.reset(task)
    res = env.step(Message(role="assistant", content="<answer>"), 5, finish_reason="length")
    assert res.truncated and res.truncated_by == "tokens" and not res.terminated


def test_multi_turn_without_pool_is_an_infra_error() -> None:
    with pytest.raises(InfraError):
        Env(None).reset(multi())


def test_dead_sandbox_is_rebuilt_and_state_replayed() -> None:
    flaky = FlakyPool(dead_leases=1, die_after=1)
    with Env(flaky, infra_retries=1) as env:
        env.reset(multi())
        env.step(call("write_file", path="notes.txt", content="kept\n"))
        env.step(call("run", command="echo hi > out.txt"))  # the lease's only good command
        res = env.step(call("run", command="cat notes.txt out.txt"))  # the sandbox dies here
        assert res.messages[0].exec_status == "ok" and "kept\nhi" in res.messages[0].content
        assert env.retries_used == 1 and flaky.leases == 2
        assert env.final_state().files == {**WS, "notes.txt": "kept\n", "out.txt": "hi\n"}


def test_sandbox_that_stays_dead_raises_infra_error() -> None:
    with Env(FlakyPool(dead_leases=5), infra_retries=2) as env:
        env.reset(multi())
        with pytest.raises(InfraError):
            env.step(call("run", command="true"))
        assert env.retries_used == 2


def test_text_actions_and_step_before_reset(pool) -> None:
    with pytest.raises(RuntimeError, match="before Env.reset"):
        Env(pool).step("hello")
    with Env(pool) as env:
        env.reset(multi())
        res = env.step('<tool_call>{"name": "read_file", "arguments": {"path": "sol.py"}}</tool_call>')
        assert "return a - b" in res.messages[0].content


class NoLease:
    def __init__(self) -> None:
        self.calls = 0

    def lease(self, files=None):
        self.calls += 1
        raise OSError("no space left on device")


def test_a_pool_that_cannot_lease_is_an_infra_error() -> None:
    env = Env(NoLease())
    with pytest.raises(InfraError, match="cannot lease a sandbox: OSError"):
        env.reset(multi())
    env.close()  # nothing to give back, and no error


@pytest.mark.parametrize("name", ["qwen3_coder", "gpt_oss", "glm45", "kimi_k2", "deepseek_v3", "llama3",
                                  "mistral"])
def test_a_familys_own_calls_run_and_its_feedback_speaks_it(pool, name: str) -> None:
    from rlvr.envs.dialects import DIALECTS

    d = DIALECTS[name]
    with Env(pool, dialect=d) as env:
        obs = env.reset(multi())
        assert d.hint in obs.messages[0].content
        write = ToolCall(name="write_file", arguments={"path": "sol.py", "content": "x = 1\n"})
        text = d.format_turn([write])
        res = env.step(Message(role="assistant", content=text), 10)
        assert [m.name for m in res.messages] == ["write_file"]
        assert env.final_state().files["sol.py"] == "x = 1\n"
        res = env.step(Message(role="assistant", content="Nothing to do."))
        assert res.messages[0].content == f"No tool call found. Call a tool as {d.hint}."
        hermes = call("read_file", path="sol.py").content  # rlvr's own format is not this family's
        if name not in ("qwen3_coder", "glm45"):  # (their `<tool_call>` opener is hermes' too)
            answer = env.step(Message(role="assistant", content=hermes)).messages[0].content
            assert answer.startswith("No tool call")


def test_mistral_errors_ride_on_the_first_tool_result(pool) -> None:
    from rlvr.envs.dialects import DIALECTS

    d = DIALECTS["mistral"]
    with Env(pool, dialect=d) as env:
        env.reset(multi())
        text = '[TOOL_CALLS]read_file[ARGS]{"path": "sol.py"}[TOOL_CALLS]run[ARGS]{"command": '
        res = env.step(Message(role="assistant", content=text))
        assert [m.role for m in res.messages] == ["tool"]  # its template refuses a user message here
        assert res.messages[0].content.startswith("error: tool call 2")
        assert "return a - b" in res.messages[0].content
        assert res.info["call_errors"] == 1
    with Env(pool) as env:  # other families: the errors come first, as user messages
        env.reset(multi())
        text = call("read_file", path="sol.py").content + "<tool_call>{"
        res = env.step(Message(role="assistant", content=text))
        assert [m.role for m in res.messages] == ["user", "tool"]
