"""Agent harnesses run unmodified in the sandbox on a code task, through the gateway, as `rlvr eval --agent
PRESET` runs them (`make agent-venv harness-node` installs them): Claude Code (Messages), Codex and the OpenAI
Agents SDK's default Agent (Responses), mini-swe-agent and smolagents (chat completions; smolagents' CodeAgent
with structured outputs, a grammar-constrained JSON turn). A scripted tiny model writes each harness's tool
call in rlvr's call format; the harness's own client code carries it both ways. Each episode must fix the task
(the verifier's hidden test passes), its record must extend call after call (one segment), and its tool calls
must be the model's own, by name."""
from __future__ import annotations

import json
import shutil
import time

import pytest

from rlvr.config import AgentConfig
from rlvr.rollout.gateway.presets import INSTALLS, PRESETS, harness_root
from rlvr.tasks.spec import Task, TaskLimits
from tests.scripted_hf import ScriptedHF

pytestmark = [pytest.mark.integrations, pytest.mark.timeout(300)]

FIX = "echo 'def add(a, b): return a + b' > sol.py"
TASK = Task(id="add", domain="code", prompt="sol.py has a stub add(a, b). Make it return the sum.",
            workspace={"sol.py": "def add(a, b):\n    pass\n"},
            hidden={"test_h.py": "from sol import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"},
            verifier={"kind": "code", "tests": ["test_h.py"]},
            limits=TaskLimits(max_turns=6, max_tokens=4000, wall_s=240))


def call(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


SCRIPTS = {
    "claude-code": ["I will fix it. " + call("Bash", {"command": FIX, "description": "Write the fix"}),
                    "Fixed."],
    "codex": ["I will fix it. " + call("exec_command", {"cmd": FIX}), "Fixed."],
    "openai-agents": ["I will fix it. " + call("shell", {"command": FIX}), "Fixed."],
    "mini-swe-agent": ["I will fix it. " + call("bash", {"command": FIX}),
                       "Submitting. " + call("bash",
                                             {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})],
    "smolagents": [call("shell", {"command": FIX}),
                   # it asks for tool_choice required: a call and nothing else
                   call("final_answer", {"answer": "Fixed."})],
    "smolagents-code": [json.dumps({"thought": "Fix it, then answer.",
                                    "code": f"shell(command={FIX!r})\nfinal_answer('Fixed.')"})],
}
"""Each harness's turns: its own tool names and argument names, in rlvr's call format."""
REWRITES = {"smolagents": 1}
"""Harnesses that send an earlier turn back rewritten (smolagents' ToolCallingAgent sends its calls back as
text, "Calling tools: [...]"): each such call starts a segment of its own, trained on exactly what the model
saw."""
CALLS = {"claude-code": ["Bash"], "codex": ["exec_command"], "openai-agents": ["shell"],
         "mini-swe-agent": ["bash", "bash"], "smolagents": ["shell", "final_answer"], "smolagents-code": []}


@pytest.fixture(scope="module")
def scorer():
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.result import ExecLimits
    from rlvr.verify.scorer import Scorer

    assert shutil.which("bwrap"), "the agents run in the bubblewrap sandbox: make setup installs it"
    with BwrapPool(ExecLimits(), workers=1, warm=(), spares=0) as pool:
        yield Scorer(pool)


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_harness_fixes_a_code_task_through_the_gateway(name, scorer, capsys):
    from rlvr.rollout.gateway.agents import AgentRollouts, agent_python
    from rlvr.rollout.gateway.core import Gateway
    from rlvr.rollout.policies.builtin import resolve_builtin
    from rlvr.rollout.policy import SamplingParams
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.result import ExecLimits

    preset = PRESETS[name]
    sub, target = INSTALLS[preset.runtime]
    assert (harness_root() / sub).is_dir(), f"{name} is not installed: `{target}` installs it"
    t0 = time.perf_counter()
    policy = ScriptedHF(resolve_builtin("builtin:tiny"), SCRIPTS[name], forward=False)
    gateway = Gateway(policy, SamplingParams(max_new_tokens=400), model_name="policy")
    cfg = AgentConfig(command=name)
    try:
        with BwrapPool(ExecLimits(), workers=1, warm=(), spares=0, python=agent_python(cfg)) as pool:
            ep, = AgentRollouts(gateway, pool, scorer, cfg).run([TASK], 1)
    finally:
        gateway.close()
    seconds = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n{name}: {seconds:.1f} s, {ep.num_turns} calls ({', '.join(ep.metadata['tool_names'])})")
    assert ep.metadata["agent_exit_code"] == 0, ep.metadata["agent_stderr"]
    assert ep.status == "done" and ep.passed and ep.reward == 1.0, (ep.verdict, ep.metadata["agent_stderr"])
    assert ep.final_state.files["sol.py"].strip() == "def add(a, b): return a + b"
    assert ep.num_turns == len(SCRIPTS[name]) and ep.metadata["tool_names"] == CALLS[name]
    # each call extended the record (the harness sent back what it got), or started a segment where it did not
    assert len(ep.metadata["segments"]) == REWRITES.get(name, 0)
    assert {c["api"] for c in ep.metadata["calls"]} == {preset.api}
    trained = sum(ep.loss_mask) + sum(sum(s["loss_mask"]) for s in ep.metadata["segments"])
    assert trained == ep.num_generated_tokens > 0, "every sampled token is trained, once"
    if name == "smolagents-code":  # CodeAgent's structured outputs: a JSON-schema turn, constrained
        assert all(c["constrained"] for c in ep.metadata["calls"])
