"""What every adapter shares: the tasks, one sandbox pool and one Scorer (`Runtime`), and rlvr's Env driven by
tool calls, one episode at a time (`EnvSession`).

    runtime = Runtime.build("code:20")              # tasks, a sandbox pool, the Scorer (built once)
    session = runtime.session()
    first = session.start(runtime.task("code/easy-multi-s0-3"), seed=0)
    text, done = session.call("write_file", {"path": "solution.py", "content": "..."})
    scored = session.finish()                       # the verdict and reward from rlvr.verify.scorer.Scorer

Every adapter (the OpenEnv server, TRL's environment class, the verifiers taskset, the skyrl-gym env and the
verl reward function) goes through these two classes, so a verdict means the same thing in every trainer. A
multi-turn task acts through rlvr's tools in a leased sandbox; a single-turn task takes its answer through
`submit(answer)` (or `session.answer(text)` for a trainer that hands over the completion itself).

An `EnvSession` is not an `rlvr.rollout.episode.Episode`: that is the record of an episode a rollout driver
stores; a session is the live interface through which an adapter plays episodes, one after another.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from typing_extensions import Self

from rlvr.config import RunConfig
from rlvr.envs.env import Env
from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.tools import tools_for
from rlvr.errors import InfraError, UserError
from rlvr.run import Run, selections
from rlvr.run import build as run_build
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scored, Scorer

TaskInput = str | TaskSource | Sequence[Task]
"""A tasks SPEC (`code:50,math:20`), a task source, or tasks themselves."""

SUBMIT_ONLY = {"type": "function", "function": {
    "name": "submit", "description": "Give the final answer; ends the task.",
    "parameters": {"type": "object",
                   "properties": {"answer": {"type": "string", "description": "the answer"}},
                   "required": ["answer"]}}}
"""The one tool of a single-turn task."""


def resolve_tasks(tasks: TaskInput, *, n: int | None = None, seed: int = 0, offset: int = 0,
                  settings: Mapping[str, Mapping[str, Any]] | None = None) -> list[Task]:
    """Tasks from a SPEC (per-domain `settings` as in `[tasks.domains]`), a source (`n`, `seed`, `offset`
    sample it) or a list; keys must be unique. Raises UserError on bad input."""
    if settings and not isinstance(tasks, str):
        raise UserError("domain settings apply to a tasks SPEC only", field="settings",
                        fix="build the source with rlvr.tasks.registry.make(name, **settings) instead")
    if isinstance(tasks, str):
        out: list[Task] = []
        for sel in selections(tasks, settings or {}):
            out.extend(sel.source.sample(sel.n if sel.n is not None else n, seed=seed, offset=offset))
        resolved = out
    elif isinstance(tasks, TaskSource):
        resolved = tasks.sample(n, seed=seed, offset=offset)
    else:
        if n is not None or offset:
            raise UserError("n and offset select from a SPEC or a source, not from a list of tasks",
                            field="tasks",
                            fix="slice the list instead")
        resolved = list(tasks)
        if not all(isinstance(t, Task) for t in resolved):
            raise UserError("expected a tasks SPEC, a TaskSource or a list of Task", field="tasks",
                            fix="e.g. load_tasks('code:50')")
    if not resolved:
        raise UserError("no tasks selected", field="tasks",
                        fix="name a domain or pack with at least one task")
    seen: set[str] = set()
    for task in resolved:
        if task.key in seen:
            raise UserError(f"task {task.key} appears twice", field="tasks", fix="select each task once")
        seen.add(task.key)
    return resolved


def tool_specs(task: Task) -> list[dict[str, Any]]:
    """The OpenAI `tools` entries a task's episode offers: rlvr's tools, or only submit for a single-turn
    task."""
    return [t.spec() for t in tools_for(task).values()] if task.multi_turn else [SUBMIT_ONLY]


def verdict_metadata(scored: Scored) -> dict[str, Any]:
    """The verdict as plain JSON: score, passed, checks, integrity flags, infra error, and the reward."""
    v = scored.verdict
    return {"reward": scored.reward, "score": v.score, "passed": v.passed, "infra_error": v.infra_error,
            "checks": [c.model_dump(mode="json") for c in v.checks],
            "flags": [f.model_dump(mode="json") for f in v.flags]}


_SHARED: dict[tuple[str, str], Runtime] = {}
_SHARED_LOCK = threading.Lock()


class Runtime:
    """The tasks of an adapter, one sandbox pool and one Scorer, shared by all its sessions (thread-safe).

    The pool and the Scorer are the run's (`rlvr.run.build` on `config`, default a plain RunConfig: the local
    isolated pool, one infra retry), built on first need. `pool` is borrowed instead (the caller closes it);
    otherwise the runtime closes its own in `close()`. `flag_penalty` and `retries`, when given, replace the
    config's `train.flag_penalty` (the reward of a verdict flagged as a reward hack) and
    `rollout.infra_retries`.
    """

    def __init__(self, tasks: Sequence[Task], *, pool: SandboxPool | None = None,
                 flag_penalty: float | None = None,
                 retries: int | None = None, max_turns: int | None = None,
                 config: RunConfig | None = None) -> None:
        self.tasks = list(tasks)
        self.by_key = {t.key: t for t in self.tasks}
        self.max_turns = max_turns
        cfg = config or RunConfig()
        if flag_penalty is not None:
            train = cfg.train.model_copy(update={"flag_penalty": flag_penalty})
            cfg = cfg.model_copy(update={"train": train})
        if retries is not None:
            rollout = cfg.rollout.model_copy(update={"infra_retries": retries})
            cfg = cfg.model_copy(update={"rollout": rollout})
        self.cfg = cfg
        self._borrowed = pool
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self._run: Run | None = None

    @classmethod
    def build(cls, tasks: TaskInput, *, pool: SandboxPool | None = None, flag_penalty: float | None = None,
              config: RunConfig | None = None, **select: Any) -> Runtime:
        """A runtime over `resolve_tasks(tasks, **select)` (a config's `[tasks.domains]` settings apply)."""
        if config is not None and isinstance(tasks, str):
            select.setdefault("settings", config.tasks.domains)
        return cls(resolve_tasks(tasks, **select), pool=pool, flag_penalty=flag_penalty, config=config)

    def _built(self) -> Run:
        with self._lock:
            if self._run is None:
                self._run = self._stack.enter_context(run_build(self.cfg, policy=False, pool=self._borrowed,
                                                                domains={t.domain for t in self.tasks}))
            return self._run

    @property
    def pool(self) -> SandboxPool:
        return self._built().pool

    @property
    def scorer(self) -> Scorer:
        """The one Scorer of this runtime (built on first use, with the runtime's pool)."""
        return self._built().scorer

    def task(self, ref: str | int | None = None, seed: int = 0) -> Task:
        """A task by key (`domain/id`), by index into the tasks, or (None) the one the seed picks."""
        if ref is None:
            return self.tasks[seed % len(self.tasks)]
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise UserError(f"task must be a key or an index, got {type(ref).__name__}", field="task",
                            fix="give domain/id or an integer index")
        if isinstance(ref, int) or ref.isdigit():
            i = int(ref)
            if not 0 <= i < len(self.tasks):
                raise UserError(f"task index {i} is out of range (0..{len(self.tasks) - 1})", field="task",
                                fix="give an index below the number of tasks served")
            return self.tasks[i]
        task = self.by_key.get(ref)
        if task is None:
            near = sorted(k for k in self.by_key if ref.split("/")[-1] in k)[:3]
            raise UserError(f"unknown task {ref!r}", field="task",
                            fix=f"did you mean {', '.join(near)}?" if near else "give a key of a served task")
        return task

    def score_answer(self, task: Task, answer: str, seed: int = 0) -> Scored:
        """The Scorer's verdict on a single-turn answer (over the task's untouched workspace)."""
        return self.scorer.score(task, FinalState(files=dict(task.workspace), answer=answer), seed)

    def session(self) -> EnvSession:
        """A new session on this runtime's tasks, pool and Scorer (one per concurrent episode)."""
        return EnvSession(self)

    @classmethod
    def shared(cls, spec: str, **select: Any) -> Runtime:
        """One runtime per (SPEC, selection) in this process, for adapters whose trainer builds environments
        by name (skyrl-gym) or calls a bare function (verl): they share its pool and Scorer."""
        key = (spec, json.dumps(select, sort_keys=True, default=str))
        with _SHARED_LOCK:
            if key not in _SHARED:
                _SHARED[key] = cls.build(spec, **select)
            return _SHARED[key]

    def close(self) -> None:
        """Close the pool if this runtime started it (idempotent; a later use builds the run again)."""
        with self._lock:
            stack, self._stack, self._run = self._stack, ExitStack(), None
        stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EnvSession:
    """rlvr's Env driven by tool calls, one episode at a time: each `start` begins an episode, which holds a
    sandbox lease until `finish` or `close`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.env: Env | None = None
        self.task: Task | None = None
        self.seed = 0
        self.done = False
        self.truncated_by: str | None = None
        self.infra_error: str | None = None
        self.scored: Scored | None = None

    def start(self, task: Task, seed: int = 0, *, system_prompt: bool = False) -> list[Message]:
        """Begin an episode on `task` (leasing a fresh sandbox for a multi-turn one); the first messages
        (`system_prompt`: led by the Env's system message, which teaches the text tool-call format)."""
        self.close()
        pool = self.runtime.pool if task.multi_turn else None
        self.env = Env(pool, max_turns=self.runtime.max_turns, system_prompt=system_prompt)
        self.task, self.seed, self.done, self.truncated_by, self.scored = task, seed, False, None, None
        self.infra_error = None
        return self.env.reset(task, seed).messages

    @property
    def tools(self) -> list[dict[str, Any]]:
        return tool_specs(self._need_task())

    def _need_task(self) -> Task:
        if self.task is None or self.env is None:
            raise UserError("no episode in progress", field="reset", fix="reset before acting")
        return self.task

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> tuple[str, bool]:
        """Run one tool call; (the text the model reads, whether the episode is over). A bad name or argument
        is an error the model reads, never an exception; calls after the end are refused the same way."""
        task = self._need_task()
        assert self.env is not None
        if self.done:
            return "error: the episode is over (reset to start another)", True
        args = dict(arguments or {})
        if not task.multi_turn:
            if name != "submit":
                return f"error: this task takes its answer through submit(answer), not {name!r}", False
            return "submitted", self.answer(str(args.get("answer", "")))
        return self._step(Message(role="assistant", tool_calls=[ToolCall(name=name, arguments=args)]))

    def act(self, text: str) -> tuple[str, bool]:
        """Take a model's whole reply: the answer of a single-turn task, or text tool calls (the Env's own
        format, taught by its system message) for a multi-turn one; (feedback, whether the episode is
        over)."""
        task = self._need_task()
        if self.done:
            return "error: the episode is over (reset to start another)", True
        if not task.multi_turn:
            return "", self.answer(text)
        return self._step(Message(role="assistant", content=text))

    def _step(self, action: Message) -> tuple[str, bool]:
        assert self.env is not None
        try:
            res = self.env.step(action)
        except InfraError as exc:
            self.done, self.truncated_by, self.infra_error = True, "infra", str(exc)
            return f"error: the sandbox failed ({exc}); the episode ends", True
        self.done = res.terminated or res.truncated
        self.truncated_by = res.truncated_by
        text = "\n".join(m.content for m in res.messages)
        if res.truncated:
            text += f"\n[episode over: the {res.truncated_by} budget ran out]"
        return text, self.done

    def answer(self, text: str) -> bool:
        """Give a single-turn task its answer (the episode ends); True."""
        self._need_task()
        assert self.env is not None
        self.env.step(text)
        self.done = True
        return True

    def finish(self) -> Scored:
        """Score the final state with the runtime's Scorer (once) and give the sandbox back."""
        if self.scored is not None:
            return self.scored
        from rlvr.verify.verdict import Verdict

        task = self._need_task()
        assert self.env is not None
        try:
            if self.infra_error is not None:  # the episode ended on a sandbox fault: masked, never scored
                raise InfraError(self.infra_error)
            final = self.env.final_state()
        except InfraError as exc:
            self.scored = Scored(Verdict(score=0.0, passed=False, infra_error=str(exc)), 0.0)
        else:
            self.scored = self.runtime.scorer.score(task, final, self.seed)
        finally:
            self.env.close()
        self.done = True
        return self.scored

    def close(self) -> None:
        """Give the sandbox back without scoring (idempotent)."""
        env, self.env = self.env, None
        if env is not None:
            env.close()
