"""The Env: `reset(task, seed)` gives the first observation, `step(action)` runs the model's tool calls in the
task's sandbox and says whether the episode terminated (submit, or the answer of a single-turn task) or was
truncated (a turn, token or wall-clock budget ran out: truncation, not failure).

An attempts task (`Task.attempts`) is answered rather than acted on with tools: each turn is an answer, which
the task's domain checks on its visible cases (`rlvr.envs.feedback`); a failed one is answered with what
failed, and the episode terminates when an answer passes them or the budget of attempts is spent (the task's
own rule, like the last move of a game: the verifier judges the last answer, nothing was cut).

It reads a turn's calls with the episode's tool dialect (`rlvr.envs.dialects`: the model family's own form)
and answers malformed ones in it."""
from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.dialects import HERMES, Dialect
from rlvr.envs.feedback import Check, FeedbackMode, message
from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.tools import COMMANDS, ToolContext, call_tool, refuse_links_out, tools_for
from rlvr.errors import InfraError, UserError
from rlvr.sandbox import tree
from rlvr.sandbox.base import Sandbox, SandboxPool, environment_of
from rlvr.sandbox.limits import for_task
from rlvr.sandbox.requirements import pool_for
from rlvr.tasks.spec import FinalState, Task

SYSTEM_PROMPT = "Act by calling tools as {hint}. Tools: {tools}. submit() ends the task."


@dataclass(frozen=True)
class Budgets:
    """Budgets of one episode (from the task's limits, optionally overridden by the run config)."""

    max_turns: int
    """Model turns allowed."""
    max_tokens: int
    """Generated tokens allowed over the episode."""
    wall_s: float
    """Wall-clock seconds for the episode, tools included."""


@dataclass
class Observation:
    """What the model sees after reset: the conversation so far and the tools it may call."""

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class StepResult:
    """The outcome of one action."""

    messages: list[Message]
    """New messages to append (tool results or environment feedback)."""
    terminated: bool = False
    truncated: bool = False
    truncated_by: str | None = None
    """turns, tokens or wall."""
    info: dict[str, Any] = field(default_factory=dict)


class Env:
    """One episode on one task. Multi-turn tasks lease a sandbox from the pool for the episode's lifetime."""

    def __init__(self, pool: SandboxPool | None, *, max_turns: int | None = None,
                 max_tokens: int | None = None,
                 max_output_chars: int = 4000, infra_retries: int = 1, system_prompt: bool = True,
                 feedback: FeedbackMode = "cases", dialect: Dialect = HERMES) -> None:
        """`feedback`: what an attempts task's failed answer is told (`rlvr.envs.feedback.message`)."""
        self.pool = pool
        self.feedback = feedback
        self.dialect = dialect
        """How the model writes tool calls (its family's form): what `step` parses and what feedback shows."""
        self.overrides = (max_turns, max_tokens)
        self.max_output_chars = max_output_chars
        self.infra_retries = infra_retries
        self.system_prompt = system_prompt
        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self._lease: AbstractContextManager[Sandbox] | None = None
        self._replay: list[ToolCall] = []
        self.tools: list[dict[str, Any]] = []
        """The episode's tool specs (OpenAI form): what the model was offered, and how an untyped form's
        arguments are typed."""
        self.reset_count = 0
        self.retries_used = 0
        self.nodes: list[str] = []
        """The node of each sandbox this episode held, in order (a pool on Ray names them; a local one does
        not): all but the last were lost under it."""

    # ------------------------------------------------------------------------------------------ lifecycle
    def reset(self, task: Task, seed: int = 0) -> Observation:
        """Start an episode: lease a fresh sandbox with the task's workspace (multi-turn tasks)."""
        self.close()
        self.task, self.seed = task, seed
        lim = task.limits
        turns = (self.overrides[0] or lim.max_turns) if task.turns > 1 else 1
        self.budgets = Budgets(turns, self.overrides[1] or lim.max_tokens, lim.wall_s)
        self.turns = self.tokens = 0
        self.answer: str | None = None
        self.refused: list[str] = []
        """Links out of the workspace removed during the episode (`refuse_links_out`): the verifier flags
        them."""
        self.ran_code = False
        """Whether a tool ran code in the workspace (which could leave a link behind)."""
        self.t0 = time.monotonic()
        self._replay = []
        messages: list[Message] = []
        self.tools = []
        if self.tool_mode:
            self._open()
            table = tools_for(task)
            self.tools = [t.spec() for t in table.values()]
            if self.system_prompt:
                sig = ", ".join(f"{n}({', '.join(t.parameters['properties'])})" for n, t in table.items())
                messages.append(Message(role="system",
                                        content=SYSTEM_PROMPT.format(hint=self.dialect.hint, tools=sig)))
        messages.append(Message(role="user", content=task.prompt))
        return Observation(messages, list(self.tools))

    @property
    def tool_mode(self) -> bool:
        """True when the model acts through tools: a multi-turn task (a turn override never changes that)."""
        assert self.task is not None
        return self.task.multi_turn

    def _open(self) -> None:
        if self.pool is None:
            raise InfraError("a multi-turn task needs a sandbox pool")
        assert self.task is not None
        try:
            lease = pool_for(self.pool, self.task.requirements).lease(dict(self.task.workspace),
                                                                      **environment_of(self.task))
            self.sandbox = lease.__enter__()
        except (InfraError, UserError):
            raise
        except Exception as exc:  # a pool that cannot lease is an infra fault, retried upstream
            raise InfraError(f"cannot lease a sandbox: {type(exc).__name__}: {exc}") from exc
        self._lease = lease
        if tree.has_tree(self.task.workspace):  # a tree task: the agent sees the tree, not its archive
            try:
                tree.restore(self.sandbox)
            except BaseException:
                self.close()
                raise
        self.reset_count += 1
        node = getattr(self.sandbox, "node", None)
        if isinstance(node, str):
            self.nodes.append(node)

    def close(self) -> None:
        """Give the sandbox back (idempotent)."""
        lease, self._lease, self.sandbox = self._lease, None, None
        if lease is not None:
            lease.__exit__(None, None, None)

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------ step
    def step(self, action: Message | str, num_tokens: int = 0, finish_reason: str = "stop",
             call_errors: Sequence[str] = ()) -> StepResult:
        """Act: parse and run the tool calls of `action` (an assistant message or its text), or take it as the
        answer; raises InfraError only when the sandbox failed and rebuilding it `infra_retries` times did not
        help."""
        if self.task is None:
            raise RuntimeError("Env.step() before Env.reset()")
        if isinstance(action, str):
            action = Message(role="assistant", content=action)
        self.turns += 1
        self.tokens += num_tokens
        if self.task.attempts:
            return self._attempt(action.content)
        if not self.tool_mode:
            self.answer = action.content
            cut = finish_reason == "length"
            return StepResult([], terminated=not cut, truncated=cut, truncated_by="tokens" if cut else None)
        calls, errors = (list(action.tool_calls), []) if action.tool_calls else self._parse(action.content)
        errors = [*call_errors, *errors]  # native calls the backend could not deliver intact
        out: list[Message] = []
        if not calls and not errors:
            out.append(Message(role="user",
                               content=f"No tool call found. Call a tool as {self.dialect.hint}."))
        terminated = False
        for call in calls:
            result = self._run_call(call)
            self.refused += result.refused
            self.ran_code = self.ran_code or call.name in COMMANDS
            out.append(Message(role="tool", content=result.content, tool_call_id=call.id or None,
                               name=call.name,
                               exec_status=result.exec_status))
            if result.submitted:
                terminated, self.answer = True, result.answer
                break
        out = self._with_errors(out, errors)
        res = StepResult(out, terminated=terminated,
                         info={"tool_calls": len(calls), "call_errors": len(errors)})
        if not terminated:
            res.truncated_by = self.exhausted()
            res.truncated = res.truncated_by is not None
        return res

    def _attempt(self, answer: str) -> StepResult:
        """One answer of an attempts task: checked on the visible cases; the episode ends when it passed,
        else the model is told what failed (`info["attempt_passed"]`). An answer after which nothing more can
        be said (the last attempt, or a spent token or time budget) is not checked: the verifier's hidden
        cases judge it (`attempt_passed` None), and a sandboxed run is saved."""
        self.answer = answer
        last = self.turns >= self.budgets.max_turns
        cut = None if last else self.exhausted()
        if last or cut is not None:
            return StepResult([], terminated=cut is None, truncated=cut is not None, truncated_by=cut,
                              info={"attempt_passed": None})
        check = self._check(answer)
        info = {"attempt_passed": check.passed}
        if check.passed:
            return StepResult([], terminated=True, info=info)
        return StepResult([Message(role="user", content=message(check, self.feedback))], info=info)

    def _check(self, answer: str) -> Check:
        """The domain's check of an answer, an infra fault retried `infra_retries` times."""
        from rlvr.tasks.registry import feedback_of

        assert self.task is not None
        check = feedback_of(self.task.domain)
        if check is None:
            raise UserError(f"domain {self.task.domain!r} cannot check the answers of an attempts task",
                            file=self.task.source or self.task.key, field="attempts",
                            fix="set attempts = false, or use a domain with feedback (code)")
        for attempt in range(self.infra_retries + 1):
            try:
                return check(self.pool, self.task, answer)
            except InfraError:
                if attempt == self.infra_retries:
                    raise
                self.retries_used += 1
        raise AssertionError("unreachable")

    def _parse(self, text: str) -> tuple[list[ToolCall], list[str]]:
        parsed = self.dialect.parse(text, self.tools)
        return parsed.calls, parsed.errors

    def _with_errors(self, out: list[Message], errors: list[str]) -> list[Message]:
        """The turn's answers with its malformed-call errors: user messages first, or, for a family whose
        template refuses a user message after a turn with calls (Mistral), at the head of the first tool
        result."""
        notes = ["error: " + e for e in errors]
        if not notes:
            return out
        if out and out[0].role == "tool" and not self.dialect.user_after_calls:
            first = out[0].model_copy(update={"content": "\n".join(notes) + "\n\n" + out[0].content})
            return [first, *out[1:]]
        return [Message(role="user", content=n) for n in notes] + out

    def exhausted(self) -> str | None:
        """The budget that has run out, if any."""
        if self.turns >= self.budgets.max_turns:
            return "turns"
        if self.tokens >= self.budgets.max_tokens:
            return "tokens"
        if time.monotonic() - self.t0 >= self.budgets.wall_s:
            return "wall"
        return None

    def _ctx(self) -> ToolContext:
        assert self.task is not None and self.sandbox is not None
        # the pool's [sandbox] defaults under the task's own limits (rlvr.sandbox.limits); a tool's request
        # can
        # only tighten these
        return ToolContext(self.sandbox, self.task, for_task(self.pool, self.task), self.max_output_chars)

    def _run_call(self, call: ToolCall):  # -> ToolOutput
        for attempt in range(self.infra_retries + 1):
            try:
                result = call_tool(call.name, self._ctx(), call.arguments)
            except InfraError:
                if attempt == self.infra_retries:
                    raise
                self.retries_used += 1
                self._rebuild()
                continue
            tool = tools_for(self.task).get(call.name)
            if tool is not None and tool.mutates:
                self._replay.append(call)
            return result
        raise AssertionError("unreachable")

    def _rebuild(self) -> None:
        """A fresh sandbox with the workspace, then every state-changing call so far replayed in order."""
        self.close()
        self._open()
        for call in self._replay:
            call_tool(call.name, self._ctx(), call.arguments)

    # -------------------------------------------------------------------------------------------- the end
    def final_state(self) -> FinalState:
        """What the verifier judges: the workspace files (read from the sandbox; a tree task's packed whole,
        `rlvr.sandbox.tree`) and the answer."""
        assert self.task is not None
        if self.sandbox is None:
            return FinalState(files=dict(self.task.workspace), answer=self.answer)
        packed = tree.has_tree(self.task.workspace)
        for attempt in range(self.infra_retries + 1):
            try:
                # links out of the workspace however made (the shell tools remove those they see made)
                swept = refuse_links_out(self.sandbox) if self.ran_code else []
                refused = [*self.refused, *(p for p, _ in swept)]
                files = tree.capture(self.sandbox) if packed else self.sandbox.read_files(None)
                return FinalState(files=files, answer=self.answer, refused=sorted(set(refused)))
            except Exception as exc:  # a dead sandbox may fail in any way here: an infra fault
                if attempt == self.infra_retries:
                    raise InfraError(f"cannot read the final workspace: {exc}") from exc
                self.retries_used += 1
                self._rebuild()
        raise AssertionError("unreachable")
