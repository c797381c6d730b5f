"""The skyrl-gym env: registered under an id, built by `skyrl_gym.make`, text tool calls in a sandbox."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import skyrl_gym

from rlvr.envs.parse import CLOSE, OPEN
from rlvr.envs.tools import TOOLS
from rlvr.errors import UserError
from rlvr.integrations.session import Runtime
from rlvr.integrations.skyrl import RlvrTextEnv, register
from tests.conftest import ADD_SOLUTION
from tests.integrations.servers import write_add_pack


def call(name: str, **arguments: str) -> str:
    return OPEN + json.dumps({"name": name, "arguments": arguments}) + CLOSE


def test_make_builds_an_env_that_runs_tool_calls_and_ends_with_the_verdict(tmp_path: Path) -> None:
    spec = str(write_add_pack(tmp_path / "pack"))
    env_id = register("rlvr-test-code", tasks=spec)
    env = skyrl_gym.make(env_id, extras={"extra_info": {"task": "code/add"}})
    assert isinstance(env, RlvrTextEnv) and env.max_turns == 6
    try:
        prompt, info = env.init([])
        assert [m["role"] for m in prompt] == ["system", "user"] and OPEN in prompt[0]["content"]
        assert info["task"] == "code/add" and len(info["tools"]) == len(TOOLS)
        out = env.step("I will look first. " + call("list_files"))
        assert not out["done"] and "add.py" in out["observations"][0]["content"] and out["reward"] == 0.0
        out = env.step("no tool call here")
        assert not out["done"] and "No tool call found" in out["observations"][0]["content"]
        out = env.step(call("write_file", path="add.py", content=ADD_SOLUTION["add.py"]) + call("submit"))
        assert (out["done"] and out["reward"] == 1.0 and out["metadata"]["passed"]
                and out["metadata"]["checks"])
        assert env.get_metrics() == {"passed": 1.0, "flagged": 0.0, "infra_error": 0.0}
        pool = Runtime.shared(spec).pool
        env.close()
        assert not any((pool.base / "leases").iterdir())
        other = skyrl_gym.make(env_id, extras={"task": 1, "seed": 2})
        other.init([{"role": "user", "content": "from the dataset"}])
        out = other.step(call("submit"))  # the stub: hidden tests fail
        assert out["done"] and out["reward"] == 0.0 and not out["metadata"]["passed"]
        other.close()
        with pytest.raises(UserError, match="unknown task"):
            skyrl_gym.make(env_id, extras={"task": "code/nope"})
    finally:
        skyrl_gym.envs.registration.deregister(env_id)


def test_single_turn_tasks_take_the_reply_as_the_answer(answer_tasks) -> None:  # type: ignore[no-untyped-def]
    with Runtime(answer_tasks) as runtime:
        env = RlvrTextEnv(extras={"task": "toy/t3"}, runtime=runtime)
        prompt, _ = env.init([])
        assert prompt == [{"role": "user", "content": "Reply with 3."}]
        out = env.step("<answer>3</answer>")
        assert out["done"] and out["reward"] == 1.0
    with pytest.raises(UserError, match="needs tasks"):
        RlvrTextEnv(env_config={}, extras={})
