"""What every adapter shares: the tasks, one sandbox pool and one Scorer (`Runtime`), and one episode of rlvr's
Env driven by tool calls (`Episode`).

    runtime = Runtime.build("code:20")              # tasks, a sandbox pool, the Scorer (built once)
    ep = runtime.episode()
    first = ep.start(runtime.task("code/easy-multi-s0-3"), seed=0)
    text, done = ep.call("write_file", {"path": "solution.py", "content": "..."})
    scored = ep.finish()                            # the verdict and reward from rlvr.verify.scorer.Scorer

Every adapter (the OpenEnv server, TRL's environment class, the verifiers taskset, the skyrl-gym env and the verl
reward function) goes through these two classes, so a verdict means the same thing in every trainer. A multi-turn
task acts through rlvr's tools in a leased sandbox; a single-turn task takes its answer through `submit(answer)`
(or `ep.answer(text)` for a trainer that hands over the completion itself).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import Self

from rlvr.envs.env import Env
from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.tools import tools_for
from rlvr.errors import InfraError, UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scored, Scorer

TaskInput = str | TaskSource | Sequence[Task]
"""A tasks SPEC (`code:50,math:20`), a task source, or tasks themselves."""

SUBMIT_ONLY = {"type": "function", "function": {
    "name": "submit", "description": "Give the final answer; ends the task.",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string", "description": "the answer"}},
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
        from rlvr.tasks import registry
        from rlvr.tasks.selection import parse

        out: list[Task] = []
        for sel in parse(tasks):
            source, name = sel.source, sel.source.name
            if settings and name in settings and registry.is_registered(name):
                source = registry.make(name, **settings[name])
            out.extend(source.sample(sel.n if sel.n is not None else n, seed=seed, offset=offset))
        resolved = out
    elif isinstance(tasks, TaskSource):
        resolved = tasks.sample(n, seed=seed, offset=offset)
    else:
        if n is not None or offset:
            raise UserError("n and offset select from a SPEC or a source, not from a list of tasks", field="tasks",
                            fix="slice the list instead")
        resolved = list(tasks)
        if not all(isinstance(t, Task) for t in resolved):
            raise UserError("expected a tasks SPEC, a TaskSource or a list of Task", field="tasks",
                            fix="e.g. load_tasks('code:50')")
    if not resolved:
        raise UserError("no tasks selected", field="tasks", fix="name a domain or pack with at least one task")
    seen: set[str] = set()
    for task in resolved:
        if task.key in seen:
            raise UserError(f"task {task.key} appears twice", field="tasks", fix="select each task once")
        seen.add(task.key)
    return resolved


def tool_specs(task: Task) -> list[dict[str, Any]]:
    """The OpenAI `tools` entries a task's episode offers: rlvr's tools, or only submit for a single-turn task."""
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
    """The tasks of an adapter, one sandbox pool and one Scorer, shared by all its episodes (thread-safe).

    `pool` is borrowed (the caller closes it); without one the runtime starts an isolated pool on first need and
    closes it in `close()`. `flag_penalty` is the reward of a verdict flagged as a reward hack.
    """

    def __init__(self, tasks: Sequence[Task], *, pool: SandboxPool | None = None, flag_penalty: float = 0.0,
                 retries: int = 1, max_turns: int | None = None) -> None:
        self.tasks = list(tasks)
        self.by_key = {t.key: t for t in self.tasks}
        self.max_turns = max_turns
        self._pool, self._own_pool = pool, pool is None
        self._lock = threading.Lock()
        self._scorer: Scorer | None = None
        self._retries, self._flag_penalty = retries, flag_penalty

    @classmethod
    def build(cls, tasks: TaskInput, *, pool: SandboxPool | None = None, flag_penalty: float = 0.0,
              **select: Any) -> Runtime:
        """A runtime over `resolve_tasks(tasks, **select)`."""
        return cls(resolve_tasks(tasks, **select), pool=pool, flag_penalty=flag_penalty)

    @property
    def pool(self) -> SandboxPool:
        with self._lock:
            if self._pool is None:
                from rlvr.sandbox import make_pool

                self._pool = make_pool()
            return self._pool

    @property
    def scorer(self) -> Scorer:
        """The one Scorer of this runtime (built on first use, with the runtime's pool)."""
        pool = self.pool
        with self._lock:
            if self._scorer is None:
                self._scorer = Scorer(pool, retries=self._retries, flag_penalty=self._flag_penalty)
            return self._scorer

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

    def episode(self) -> Episode:
        return Episode(self)

    @classmethod
    def shared(cls, spec: str, **select: Any) -> Runtime:
        """One runtime per (SPEC, selection) in this process, for adapters whose trainer builds environments by
        name (skyrl-gym) or calls a bare function (verl): they share its pool and Scorer."""
        key = (spec, json.dumps(select, sort_keys=True, default=str))
        with _SHARED_LOCK:
            if key not in _SHARED:
                _SHARED[key] = cls.build(spec, **select)
            return _SHARED[key]

    def close(self) -> None:
        """Close the pool if this runtime started it (idempotent)."""
        with self._lock:
            pool, self._pool = (self._pool, None) if self._own_pool else (None, self._pool)
            self._scorer = None
        if pool is not None:
            pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Episode:
    """One episode of rlvr's Env driven by tool calls; holds a sandbox lease from `start` to `finish`/`close`."""

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
        """Run one tool call; (the text the model reads, whether the episode is over). A bad name or argument is
        an error the model reads, never an exception; calls after the end are refused the same way."""
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
        format, taught by its system message) for a multi-turn one; (feedback, whether the episode is over)."""
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
