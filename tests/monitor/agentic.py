"""Multi-turn episodes played through the real Env (tools run in a plain-subprocess sandbox), for the agentic
metrics, the no-tool-call detector and the report's turn view."""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from rlvr.envs.env import Env
from rlvr.envs.messages import Message, ToolCall
from rlvr.rollout.episode import Episode
from rlvr.sandbox.unsafe import UnsafePool
from rlvr.tasks.spec import Task, TaskLimits
from rlvr.verify.verdict import Check, Verdict

WORKSPACE = {"sol.py": "def add(a, b):\n    return a - b\n",
             "test_sol.py": "from sol import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"}
FIXED = "def add(a, b):\n    return a + b\n"
TASK = Task(id="fix-add", domain="toy", prompt="Fix add in sol.py.", workspace=WORKSPACE,
            limits=TaskLimits(max_turns=6, max_tokens=10_000))
SINGLE = Task(id="sum", domain="toy", prompt="What is 2 + 2?")
PROSE = "The `add` function is implemented using the minus operator, which is a list comprehension."


def text_call(name: str, **args: object) -> str:
    """A call in the documented text format."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def native_call(name: str, **args: object) -> Message:
    """An assistant message with one native (OpenAI-style) tool call."""
    return Message(role="assistant", content=f"calling {name}",
                   tool_calls=[ToolCall(id=f"id-{name}", name=name,
                                                                                     arguments=dict(args))])


FIX_RUN = [native_call("run_tests"), text_call("write_file", path="sol.py", content=FIXED),
           text_call("run_tests"), text_call("submit")]
"""Tests fail, the fix, tests pass, submit: 4 turns, 4 calls, the first run_tests exits non-zero."""


def play(pool: UnsafePool, actions: Sequence[str | Message], *, task: Task = TASK, step: int = 0,
         sample: int = 0,
         passed: bool = False, group: str | None = None) -> Episode:
    """An episode whose assistant turns are `actions`, played through the Env until it ends or they run
    out."""
    messages: list[Message] = []
    status, turns = "truncated", 0
    with Env(pool) as env:
        messages += env.reset(task, seed=sample).messages
        for action in actions:
            msg = action if isinstance(action, Message) else Message(role="assistant", content=action)
            messages.append(msg)
            turns += 1
            res = env.step(msg, num_tokens=len(msg.content))
            messages += res.messages
            if res.terminated or res.truncated:
                status = "done" if res.terminated else "truncated"
                break
        final = env.final_state()
    checks = [Check(name="hidden/test_add", score=float(passed), passed=passed)]
    return Episode(step=step, task_id=task.id, domain=task.domain, group_id=group or f"{task.id}@{step}",
                   sample_index=sample, messages=messages, num_turns=turns, num_generated_tokens=10 * turns,
                   status=status, final_state=final,
                   verdict=Verdict(score=float(passed), passed=passed, checks=checks),
                   reward=float(passed))


def agent_run(pool: UnsafePool, steps: int = 8, group: int = 4, stop_at: int | None = None,
              single_turn: bool = False) -> Iterator[tuple[int, list[Episode]]]:
    """A run on a multi-turn task whose policy reads a file and submits (one in four writes the fix and
    passes); from step `stop_at` on it answers in prose only (it stopped using its tools). `single_turn`: a
    run of single-turn episodes only, which never call a tool."""
    for step in range(steps):
        eps = []
        for s in range(group):
            if single_turn:
                eps.append(play(pool, ["4"], task=SINGLE, step=step, sample=s, passed=True))
            elif stop_at is not None and step >= stop_at:
                eps.append(play(pool, [PROSE, PROSE], step=step, sample=s))
            elif s == 0:  # no run_tests here: a run of pytest per step would make these runs slow
                eps.append(play(pool,
                                [text_call("write_file", path="sol.py", content=FIXED), text_call("submit")],
                                step=step, sample=s, passed=True))
            else:
                eps.append(play(pool, [text_call("read_file", path="sol.py"), text_call("submit")], step=step,
                                sample=s))
        yield step, eps
