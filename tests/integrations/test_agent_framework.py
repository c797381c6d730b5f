"""An agent framework from PyPI as the policy's driver: an OpenAI Agents SDK agent (`openai-agents`, in the
venv `make agent-venv` builds) plays an episode in its sandbox through the gateway, as `rlvr eval --agent ...
--agent-python ~/.cache/rlvr/harnesses/agent-venv` runs it; its calls are recorded and its answer judged."""
from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from rlvr.config import AgentConfig
from rlvr.rollout.gateway.presets import harness_root
from rlvr.tasks.spec import Task, TaskLimits

pytestmark = pytest.mark.integrations

VENV = Path(os.environ.get("RLVR_AGENT_VENV", harness_root() / "agent-venv"))

AGENT = textwrap.dedent('''
    import os
    from openai import AsyncOpenAI
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # no traces sent anywhere (nor could they be: no network but the gateway)

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = OpenAIChatCompletionsModel(model="policy", openai_client=AsyncOpenAI(max_retries=0))
    agent = Agent(name="solver", instructions="Answer with one number.", model=model, tools=[add])
    result = Runner.run_sync(agent, open(os.environ["RLVR_PROMPT_FILE"]).read(), max_turns=3)
    open("final.txt", "w").write(str(result.final_output))
    print(result.final_output)
''')


@pytest.mark.timeout(600)
def test_an_openai_agents_sdk_agent_plays_an_episode_through_the_gateway(tmp_path: Path) -> None:
    assert shutil.which("bwrap"), "the agent runs in the bubblewrap sandbox: make setup installs it"
    assert (VENV / "bin" / "python").exists(), "no agent venv: `make agent-venv` builds it"
    from rlvr.rollout.gateway.agents import AgentRollouts, agent_python
    from rlvr.rollout.gateway.core import Gateway
    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.rollout.policies.hf import HFPolicy
    from rlvr.rollout.policy import SamplingParams
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.result import ExecLimits
    from rlvr.verify.scorer import Scorer

    agent_dir = tmp_path / "agent-files"
    agent_dir.mkdir()
    (agent_dir / "agent.py").write_text(AGENT)
    cfg = AgentConfig(command="python $RLVR_AGENT_DIR/agent.py", dir=str(agent_dir), python=str(VENV))
    policy = HFPolicy(build_tiny_model(tmp_path / "tiny", n_layer=1, n_embd=32, n_head=2, n_positions=1024,
                                       seed=3),
                      device="cpu", threads=1)
    gateway = Gateway(policy, SamplingParams(temperature=1.0, max_new_tokens=8))
    pool = BwrapPool(ExecLimits(), workers=1, warm=(), spares=0, python=agent_python(cfg))
    task = Task(id="t0", domain="toy", prompt="What is 2 + 3?", answer="5", verifier={"kind": "answer"},
                limits=TaskLimits(max_turns=3, max_tokens=64, wall_s=120))
    try:
        ep, = AgentRollouts(gateway, pool, Scorer(pool), cfg).run([task], 1)
    finally:
        pool.close()
        gateway.close()
    assert ep.metadata["agent_exit_code"] == 0, ep.metadata["agent_stderr"]
    assert ep.status == "done" and not ep.masked and ep.verdict is not None
    assert ep.num_turns >= 1 and sum(ep.loss_mask) == ep.num_generated_tokens > 0
    assert len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)
    # the framework's final output is the episode's answer, judged by the task's verifier
    assert (ep.final_state.answer or "") == ep.final_state.files["final.txt"].strip()
    assert ep.reward == float(ep.final_state.answer == "5")
