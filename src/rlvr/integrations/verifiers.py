"""rlvr's tasks as a verifiers v1 taskset: `vf-eval rlvr-tasks --env.taskset.tasks SPEC`, and so prime-rl.

verifiers (0.4) finds a taskset by id as an importable module that exports, through `__all__`, one `Taskset`
subclass and optionally its default `Harness` and `Env`. This module defines them; the top-level module
`rlvr_tasks`, shipped in rlvr's own distribution, re-exports them under the id `rlvr-tasks`.

    vf-eval rlvr-tasks --env.taskset.tasks code:20 -m MODEL --client.base-url http://HOST/v1 --no-push

- `RlvrTaskset` yields one `RlvrTask` per task of the SPEC. Its `TaskData` carries only the task's key, prompt
  and how to rebuild it (SPEC and selection): hidden tests never enter verifiers' traces.
- `RlvrHarness` is the default harness: it runs its loop in-process, as verifiers' `Harness.launch` allows,
  with every model call going through the rollout's interception endpoint (so verifiers records the turns,
  tokens and sampling as for any harness), and rlvr's tools executing in a leased rlvr sandbox
  (`rlvr.integrations.session.EnvSession`). It installs nothing and needs no network.
- `RlvrEnv` is the single-agent env with the `subprocess` runtime as its default: the harness program is
  in-process and the tools run in rlvr's own sandbox, so no container or cloud sandbox is needed.
- `RlvrTask.rlvr` (`@vf.reward`) scores the episode's final state with the runtime's one Scorer; the verdict
  (score, passed, checks, flags, infra_error, truncated_by) is kept in `trace.info["rlvr"]`, and
  `rlvr_score`, `rlvr_passed`, `rlvr_flags` in `trace.metrics`. A verdict the verifier could not judge
  (infra error) fails the rollout's scoring instead of scoring 0, so a trainer drops it.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf  # type: ignore[import-untyped]
from pydantic import Field, PrivateAttr, model_validator
from typing_extensions import Self

from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.integrations.session import EnvSession, Runtime, verdict_metadata

TASKSET_ID = "rlvr-tasks"
"""The id verifiers loads this taskset by (the `rlvr_tasks` module)."""


class RlvrData(vf.TaskData):
    """One rlvr task as verifiers sees it: its key, prompt and how to rebuild it (never its hidden
    material)."""

    spec: str
    """The tasks SPEC the task comes from (`code:20`, a pack directory, ...)."""
    select: dict[str, Any] = Field(default_factory=dict)
    """How the SPEC was sampled (`n`, `seed`, `offset`), so any worker rebuilds the same tasks."""
    task: str
    """The task's key (`domain/id`)."""
    seed: int = 0
    """The episode seed handed to rlvr's Env and Scorer."""


class RlvrState(vf.State):
    """Per-rollout state (never serialized): the live episode between the harness and the reward."""

    _session: EnvSession | None = PrivateAttr(default=None)


class RlvrTasksetConfig(vf.TasksetConfig):
    """`--env.taskset.*`: which rlvr tasks to serve."""

    tasks: str = "code:20"
    """A tasks SPEC, as `rlvr eval --tasks` takes it."""
    n: int | None = None
    """Tasks per domain of the SPEC (None: each domain's default)."""
    seed: int = 0
    """Sampling seed of the SPEC, and the episode seed."""
    offset: int = 0
    """Skip this many tasks of each domain."""

    @property
    def selection(self) -> dict[str, Any]:
        return {"n": self.n, "seed": self.seed, "offset": self.offset}

    @model_validator(mode="after")
    def _resolve(self) -> Self:
        """Resolve the SPEC while the config is parsed, so a bad one is a one-line config error (the tasks are
        kept by `Runtime.shared` for `load`)."""
        try:
            Runtime.shared(self.tasks, **self.selection)
        except UserError as exc:
            raise ValueError(str(exc)) from None
        return self


def _runtime(data: RlvrData) -> Runtime:
    return Runtime.shared(data.spec, **data.select)


def _state(trace: vf.Trace) -> RlvrState:
    state = trace.state
    if not isinstance(state, RlvrState):
        raise TypeError(f"expected an rlvr rollout's state, got {type(state).__name__}")
    return state


class RlvrTask(vf.Task[RlvrData, RlvrState]):
    """An rlvr task: acted on through rlvr's tools (by `RlvrHarness`), scored by rlvr's Scorer."""

    @property
    def key(self) -> str:
        return self.data.task

    @vf.reward
    async def rlvr(self, trace: vf.Trace) -> float:
        """rlvr's reward for the final state of the episode the harness played."""
        state = _state(trace)
        ep = state._session
        if ep is None:
            raise RuntimeError(f"no rlvr episode ran for {self.data.task}: it is played by the "
                               f"rlvr-tasks harness "
                               "(leave --env.agent.harness unset)")
        scored = await asyncio.to_thread(ep.finish)
        state._session = None
        trace.info["rlvr"] = {**verdict_metadata(scored), "truncated_by": ep.truncated_by}
        trace.record_metrics({"rlvr_score": scored.verdict.score, "rlvr_passed": float(scored.verdict.passed),
                              "rlvr_flags": float(len(scored.verdict.flags))})
        if scored.verdict.infra_error is not None:
            raise RuntimeError(f"rlvr could not judge {self.data.task}: {scored.verdict.infra_error}")
        return float(scored.reward)


class RlvrTaskset(vf.Taskset[RlvrTask, RlvrTasksetConfig]):
    """The tasks of `config.tasks`, in SPEC order (the verifiers views `--select.*` pick among them)."""

    def load(self) -> Iterator[RlvrTask]:
        c = self.config
        select = c.selection
        for task in Runtime.shared(c.tasks, **select).tasks:
            yield RlvrTask(RlvrData(id=task.key, name=task.key, prompt=task.prompt, spec=c.tasks,
                                    select=select,
                                    task=task.key, seed=c.seed), c.task)


def _wire(messages: list[Message]) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.content} for m in messages]


class RlvrHarnessConfig(vf.HarnessConfig):
    """`--env.agent.harness.*` of the rlvr harness."""

    max_model_calls: int = Field(64, ge=1)
    """A backstop on model calls per episode (the task's own turn budget usually ends it first)."""


class RlvrHarness(vf.Harness[RlvrHarnessConfig]):
    """An in-process tool-calling loop: chat completions through the rollout's endpoint, rlvr's tools executed
    in an rlvr sandbox lease, until the episode ends (submit, a budget, or a reply without tool calls on a
    single-turn task, which is its answer)."""

    EXECUTES_CODE = False  # the model's code runs in rlvr's sandbox, never in the verifiers runtime
    NEEDS_CONTAINER = False
    APPENDS_SYSTEM_PROMPT = True

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str,
                     secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> vf.ProgramResult:
        import openai

        if not isinstance(data, RlvrData):
            raise TypeError(f"the rlvr harness runs rlvr tasks only, got {type(data).__name__}")
        rt = _runtime(data)
        ep = rt.session()
        _state(trace)._session = ep
        messages = _wire(await asyncio.to_thread(ep.start, rt.task(data.task), data.seed))
        if data.system_prompt:
            messages.insert(0, {"role": "system", "content": data.system_prompt})
        tools = ep.tools
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            for _ in range(self.config.max_model_calls):
                if ep.done:
                    break
                reply = (await client.chat.completions.create(
                    model=ctx.model, messages=messages, tools=tools,  # type: ignore[arg-type]
                )).choices[0].message
                messages.append(reply.model_dump(exclude_none=True))
                if not reply.tool_calls:
                    feedback, _ = await asyncio.to_thread(ep.act, reply.content or "")
                    if not ep.done:
                        messages.append({"role": "user", "content": feedback or "Use the tools."})
                    continue
                for call in reply.tool_calls:
                    if call.type != "function":
                        text = f"error: only function tools are offered, not a {call.type} tool call"
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                        continue
                    try:
                        args = json.loads(call.function.arguments or "{}")
                    except json.JSONDecodeError as exc:
                        text = f"error: the arguments are not JSON ({exc})"
                    else:
                        text, _ = await asyncio.to_thread(ep.call, call.function.name,
                                                          args if isinstance(args, dict) else {})
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                    if ep.done:
                        break
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    async def cleanup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Give back the sandbox of an episode that was never scored (a failed or cancelled rollout)."""
        state = trace.state
        ep = state._session if isinstance(state, RlvrState) else None
        if ep is not None:
            state._session = None  # type: ignore[union-attr]
            await asyncio.to_thread(ep.close)


class RlvrEnvConfig(vf.EnvConfig):
    """The single `agent` seat, on the local `subprocess` runtime by default (nothing runs in it)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy under evaluation or training (`--env.agent.*`)."""


class RlvrEnv(vf.Env[RlvrEnvConfig]):
    """One agent plays each rlvr task."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)


__all__ = ["RlvrEnv", "RlvrHarness", "RlvrTaskset"]
