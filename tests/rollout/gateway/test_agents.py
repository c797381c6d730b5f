"""Agents from outside as the policy: the agent runs in its episode's sandbox with the openai SDK, reaches the
gateway and nothing else, its workspace is judged, its crash is its own fault, budgets stop it."""
from __future__ import annotations

import shutil
import textwrap

import pytest

from rlvr.config import AgentConfig
from rlvr.errors import UserError
from rlvr.rollout.episode import TOKEN_BUDGET
from rlvr.rollout.gateway.agents import AgentRollouts
from rlvr.rollout.gateway.core import Gateway
from rlvr.rollout.policy import SamplingParams
from rlvr.tasks.spec import Task, TaskLimits
from rlvr.verify.scorer import Scorer

assert shutil.which("bwrap"), "agents run in the bubblewrap sandbox: `make setup` installs it"

AGENT = textwrap.dedent('''
    import os, socket, sys, openai
    client = openai.OpenAI(max_retries=0)
    prompt = open(os.environ["RLVR_PROMPT_FILE"]).read()
    messages = [{"role": "user", "content": prompt}]
    for _ in range(int(os.environ.get("CALLS", "2"))):
        r = client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
        messages.append(r.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": "go on"})
    probes = []
    try:
        socket.create_connection(("1.1.1.1", 80), timeout=2)
        probes.append("network")
    except OSError:
        pass
    if os.path.exists(os.environ["HOST_FILE"]):
        probes.append("host files")
    other = openai.OpenAI(api_key=os.environ["OTHER_KEY"], max_retries=0)
    try:
        other.models.list()
        probes.append("other key")
    except openai.AuthenticationError:
        pass
    open("sol.py", "w").write("def f(a, b):\\n    return a + b\\n")
    open("probes.txt", "w").write(",".join(probes))
    print("42")
''')


@pytest.fixture(scope="module")
def setup(tiny, tmp_path_factory):
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.result import ExecLimits

    agent_dir = tmp_path_factory.mktemp("agent")
    (agent_dir / "agent.py").write_text(AGENT)
    gw = Gateway(tiny, SamplingParams(max_new_tokens=6))
    pool = BwrapPool(ExecLimits(), workers=2, warm=(), spares=0)
    yield gw, pool, Scorer(pool), agent_dir
    pool.close()
    gw.close()


def task(i: int = 0, turns: int = 4) -> Task:
    return Task(id=f"t{i}", domain="test", prompt="Fix sol.py.", workspace={"sol.py": "pass\n"},
                verifier={"kind": "test-rollout-file"},
                limits=TaskLimits(max_turns=turns, max_tokens=200, wall_s=60))


def run(setup, command: str, tasks: list[Task], k: int = 1):
    gw, pool, scorer, agent_dir = setup
    other = gw.open_session("someone else's episode")
    cmd = f"HOST_FILE={__file__} OTHER_KEY={other.key} {command}"
    return AgentRollouts(gw, pool, scorer, AgentConfig(command=cmd, dir=str(agent_dir))).run(tasks, k)


def test_an_openai_sdk_agent_in_the_sandbox_is_recorded_and_judged(setup):
    eps = run(setup, "python $RLVR_AGENT_DIR/agent.py", [task()], k=2)
    assert {e.group_id for e in eps} == {eps[0].group_id} and [e.sample_index for e in eps] == [0, 1]
    for ep in eps:
        assert ep.status == "done", ep.metadata
        assert ep.passed and ep.reward == 1.0 and ep.final_state.answer == "42"
        assert ep.num_turns == 2 and sum(ep.loss_mask) == ep.num_generated_tokens > 0
        assert len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)
        # isolation: no network, no host files, and another episode's key is refused on this episode's socket
        assert ep.final_state.files["probes.txt"] == ""


def test_a_crashing_agent_is_the_policys_fault_not_infra(setup):
    ep = run(setup, "python -c 'import sys; print(\"boom\", file=sys.stderr); sys.exit(3)'", [task()])[0]
    assert ep.status == "done" and not ep.masked and ep.reward == 0.0
    assert ep.metadata["agent_exit_code"] == 3 and "boom" in ep.metadata["agent_stderr"]


def test_the_turn_budget_stops_the_agent_and_truncates_the_episode(setup):
    ep = run(setup, "CALLS=5 python $RLVR_AGENT_DIR/agent.py", [task(turns=2)])[0]
    assert ep.status == "truncated" and ep.truncated_by == "turns" and ep.num_turns == 2 and not ep.masked
    assert ep.metadata[TOKEN_BUDGET] == task(turns=2).limits.max_tokens  # the overlong penalty's budget


def test_an_agent_command_that_cannot_start_is_a_user_error(setup):
    with pytest.raises(UserError, match="cannot start"):
        run(setup, "no-such-agent-program", [task()])
    gw, pool, scorer, _ = setup
    with pytest.raises(UserError, match="agent directory"):
        AgentRollouts(gw, pool, scorer, AgentConfig(command="x", dir="/no/such/dir"))
