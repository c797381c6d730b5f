"""The shared runtime and session of every adapter, on the in-memory sandbox double."""
from __future__ import annotations

import pytest

from rlvr.errors import UserError
from rlvr.integrations.session import Runtime, resolve_tasks, tool_specs
from rlvr.sandbox.fake import FakePool
from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.tasks.spec import Task, TaskLimits


def multi(i: int) -> Task:
    return Task(id=f"m{i}", domain="toy", prompt=f"task {i}", answer="x", verifier={"kind": "answer"},
                limits=TaskLimits(max_turns=3), workspace={"a.txt": "a"})


def test_a_sandbox_fault_ends_the_episode_masked_and_gives_the_lease_back() -> None:
    pool = FakePool(lambda call: ExecResult(status=ExecStatus.infra_error, error="worker lost"))
    with Runtime([multi(0)], pool=pool) as runtime:
        ep = runtime.session()
        ep.start(runtime.task("toy/m0"))
        assert pool.open_leases == 1
        text, done = ep.call("run", {"command": "true"})
        assert done and "sandbox failed" in text and ep.truncated_by == "infra"
        scored = ep.finish()
        assert scored.infra_error and scored.reward == 0.0  # masked, never a real 0
        assert pool.open_leases == 0
        assert ep.call("list_files")[0].startswith("error: the episode is over")


def test_budgets_selection_and_refusals() -> None:
    pool = FakePool(lambda call: "ok\n")
    with Runtime([multi(0), multi(1)], pool=pool) as runtime:
        assert runtime.task(None, seed=3).key == "toy/m1" and runtime.task("1").key == "toy/m1"
        for ref, why in (("toy/nope", "unknown task"), (5, "out of range"), (1.5, "key or an index")):
            with pytest.raises(UserError, match=why):
                runtime.task(ref)  # type: ignore[arg-type]
        ep = runtime.session()
        with pytest.raises(UserError, match="no episode"):
            ep.call("list_files")
        ep.start(runtime.task(0))
        assert not ep.call("run", {"command": "echo"})[1]
        assert not ep.act("no call at all")[1]
        text, done = ep.call("run", {"command": "echo"})
        assert done and "turns budget ran out" in text and ep.truncated_by == "turns"
        ep.finish()
        assert pool.open_leases == 0
    single = Task(id="s", domain="toy", prompt="p", answer="4", verifier={"kind": "answer"})
    assert [s["function"]["name"] for s in tool_specs(single)] == ["submit"]
    with Runtime([single]) as runtime:
        ep = runtime.session()
        ep.start(single)
        assert "takes its answer through submit" in ep.call("run", {"command": "ls"})[0]
        assert ep.call("submit", {"answer": "<answer>4</answer>"}) == ("submitted", True)
        assert ep.finish().reward == 1.0
    with pytest.raises(UserError, match="appears twice"):
        resolve_tasks([single, single])
