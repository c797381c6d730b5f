"""Gold trajectories: a task's reference solution played through the real env as a multi-turn tool episode.

`GoldPolicy` is a policy that acts from the reference solution instead of a model. On a multi-turn task it
looks at the workspace and runs the visible tests (which fail before the fix), writes the files the reference
changes, runs the tests again (they pass) and submits; on a single-turn task it gives the reference answer; on
an attempts task (`Task.attempts`) it gives the answers its source's `gold_attempts` names, a wrong one that
the feedback corrects and then the reference, or the reference alone.
Each turn is decided from the conversation so far, so what a turn says about the tests is what the tool really
answered. The env loop plays it like any policy: the tools run in the sandbox, the episode is scored by
the Scorer, and only episodes that pass are gold (`gold_episodes`).

Given the trained policy (an encoder: the hf or vllm backend), the turns are encoded by the policy's own
tokenizer and chat template, each ended by its end-of-turn token, so the episode's token record is exactly
what SFT should teach: the template's rendering of the conversation, loss on the assistant's tokens (tools in
the template's native schema when it has one, the text format of `rlvr.envs.parse` in every assistant turn).
Without one (`rlvr tasks sft-data`, which writes messages only) a token is a UTF-8 byte, as for `scripted`.

`recovery` turns a failed episode into a recovery sample: its own turns replayed up to the point it went wrong
(kept out of the loss), then the gold continuation from the state they left, played through the env.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.messages import Message
from rlvr.envs.parse import CLOSE, OPEN
from rlvr.envs.tools import has_tests, tools_for
from rlvr.errors import UserError
from rlvr.rollout.episode import Episode
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.sandbox.tree import TREE
from rlvr.tasks import registry
from rlvr.tasks.source import ListSource, TaskSource
from rlvr.tasks.spec import FinalState, Task

__all__ = ["GOLD_SAMPLING", "EncodedGoldPolicy", "GoldPlan", "GoldPolicy", "gold_state", "plan_for", "play",
           "recovery_plan",
           "tool_call_text", "unmask_prefix"]


GOLD_SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=1 << 20)
"""A gold turn is given, not sampled: only the task's own token budget may cut it."""


def tool_call_text(name: str, arguments: dict[str, Any] | None = None) -> str:
    """One call in rlvr's text format (what every model is told to write)."""
    return f"{OPEN}{json.dumps({'name': name, 'arguments': arguments or {}})}{CLOSE}"


def source_of(task: Task, source: TaskSource | None = None) -> TaskSource:
    """`source`, else the task's domain's source (a list of the task itself for a domain not registered)."""
    if source is not None:
        return source
    return registry.make(task.domain) if registry.is_registered(task.domain) else ListSource([task])


def gold_state(task: Task, source: TaskSource | None = None) -> FinalState | None:
    """The reference final state of `task` from its domain's source (None: the task has none)."""
    return source_of(task, source).gold(task)


@dataclass
class GoldPlan:
    """How to reach one task's reference final state, turn by turn."""

    task: Task
    gold: FinalState
    prefix: list[Message] = field(default_factory=list)
    """Assistant turns replayed first, as they were (a recovery sample's failed start)."""
    commands: list[str] | None = None
    """Commands that reach the reference state at a terminal (`TaskSource.gold_commands`), run instead of
    writing its files: a state with modes, links or a git history that files cannot write."""
    attempts: list[str] = field(default_factory=list)
    """An attempts task's gold answers, in order (`TaskSource.gold_attempts`): the last is the reference."""

    @property
    def changed(self) -> dict[str, str]:
        """Files the reference writes: new or different from the task's workspace."""
        return {p: c for p, c in sorted(self.gold.files.items()) if self.task.workspace.get(p) != c}

    def next_turn(self, conversation: Sequence[Message]) -> str:
        """The assistant's next turn given the conversation so far (its tool results included)."""
        done = sum(m.role == "assistant" for m in conversation)
        if done < len(self.prefix):
            return self.prefix[done].content
        if self.task.attempts and self.attempts:  # after a replayed failure, straight to the reference
            return self.attempts[-1] if self.prefix else self.attempts[min(done, len(self.attempts) - 1)]
        if not self.task.multi_turn:
            return self.gold.answer or ""
        stages = self.stages()
        k = done - len(self.prefix)
        parts = [self._stage(s, conversation)
                 for s in stages[k]] if k < len(stages) else [self._stage("submit", conversation)]
        return "\n".join(parts)

    def stages(self) -> list[list[str]]:
        """The gold turns, each a list of stages: look (list the files, read the ones the fix changes, run the
        tests), write (the fix, then the tests again), submit; merged from the end when the turn budget is
        short. A recovery starts from its failed turns and goes straight to the fix."""
        order = ["write", "submit"] if self.prefix else ["look", "write", "submit"]
        room = max(1, self.task.limits.max_turns - len(self.prefix))
        turns = [[s] for s in order]
        while len(turns) > room:
            last = turns.pop()
            turns[-1].extend(last)
        return turns

    def _stage(self, stage: str, conversation: Sequence[Message]) -> str:
        tests = has_tests(self.task)
        if stage == "look":
            calls = [tool_call_text("list_files")]
            calls += [tool_call_text("read_file", {"path": p}) for p in self.changed
                      if p in self.task.workspace and p != TREE]
            if tests:
                calls.append(tool_call_text("run_tests"))
            return "I'll look at the workspace" + (" and run the tests" if tests
                                                   else "") + " first.\n" + "\n".join(calls)
        if stage == "write" and self.commands is not None:
            terminal = "bash" if "bash" in tools_for(self.task) else "run"
            calls = [tool_call_text(terminal, {"command": c}) for c in self.commands]
            if tests:
                calls.append(tool_call_text("run_tests"))
            lead = ("That did not work. I'll do it again, step by step." if self.prefix
                    else "I'll do it at the terminal.")
            return lead + "\n" + "\n".join(calls)
        if stage == "write":
            writes = [tool_call_text("write_file", {"path": p, "content": c}) for p,
                      c in self.changed.items()]
            if tests:
                writes.append(tool_call_text("run_tests"))
            return self._reading(conversation) + "\n" + "\n".join(writes)
        answer = {"answer": self.gold.answer} if self.gold.answer is not None else {}
        lead = ("The tests pass now. Submitting." if self._last_tests(conversation) == "passed"
                else "Submitting.")
        return lead + "\n" + tool_call_text("submit", answer)

    def _reading(self, conversation: Sequence[Message]) -> str:
        """What the last test run showed, in the words of the turn that writes the fix."""
        last = self._last_tests(conversation)
        files = ", ".join(self.changed) or "nothing"
        if self.prefix:
            return f"That did not work. I'll write {files} again, correctly" + (" and run the tests." if last
                                                                                else ".")
        if last == "failed":
            return f"The tests fail. I'll write the fix to {files} and run them again."
        return f"I'll write {files}."

    @staticmethod
    def _last_tests(conversation: Sequence[Message]) -> str | None:
        """`passed` / `failed` for the last run_tests result in the conversation, None when there was none."""
        for m in reversed(conversation):
            if m.role == "tool" and m.name == "run_tests":
                return "passed" if m.exec_status == "ok" else "failed"
        return None


def plan_for(task: Task, source: TaskSource | None = None) -> GoldPlan:
    """The gold plan of `task`; a task without a reference solution is a UserError naming its domain."""
    source = source_of(task, source)
    gold = source.gold(task)
    if gold is None or (not gold.files and gold.answer is None):
        raise UserError(f"domain {task.domain!r} has no reference solutions (task {task.key})", field="tasks",
                        fix="gold trajectories need a domain whose tasks have references (its source's gold)")
    commands = source.gold_commands(task)
    if commands is None and TREE in gold.files:
        raise UserError(f"task {task.key} keeps a workspace tree, which files cannot write, and its domain "
                        f"gives no gold commands", field="tasks",
                        fix="give the domain's source a gold_commands() for its tree tasks")
    attempts = source.gold_attempts(task) if task.attempts else []
    return GoldPlan(task, gold, commands=commands, attempts=attempts)


def recovery_plan(episode: Episode, task: Task, source: TaskSource | None = None) -> GoldPlan | None:
    """A failed episode's turns before its last one, then the gold continuation (None: nothing to recover
    from, a single-turn task or an episode without a turn to keep). An attempts task continues with its
    reference answer, after the feedback its replayed answers got."""
    if task.turns < 2:
        return None
    turns = [m for m in episode.messages if m.role == "assistant"]
    keep = turns[:-1] if len(turns) > 1 else []
    # the fix and the submit must still fit; an attempts task's reference answer alone
    budget = task.limits.max_turns - (1 if task.attempts else 2)
    if not keep or budget < 1:
        return None
    plan = plan_for(task, source)
    plan.prefix = [Message(role="assistant", content=m.content) for m in keep[:budget]]
    return plan


class GoldPolicy:
    """A policy that plays gold plans, one per task prompt (`play` runs plans that share one in rounds),
    through whatever env the env loop runs. A token is
    a UTF-8 byte and every log-prob 0 (the turns are given, not sampled): for transcripts (`rlvr tasks
    sft-data`); `EncodedGoldPolicy` speaks the trained policy's tokens."""

    def __init__(self, plans: Sequence[GoldPlan], name: str = "gold") -> None:
        self._plans: dict[str, list[GoldPlan]] = {}
        for plan in plans:
            self._plans.setdefault(plan.task.prompt, []).append(plan)
        self.name = name
        self.version = 0

    def _plan(self, conversation: Sequence[Message]) -> GoldPlan:
        prompt = next((m.content for m in conversation if m.role == "user"), "")
        found = self._plans.get(prompt)
        if not found:
            raise KeyError("no gold plan for this conversation's task")
        return found[0]

    def _tokens(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        out = []
        for i, conv in enumerate(conversations):
            text = self._plan(conv).next_turn(conv)
            ids = self._tokens(text)
            if len(ids) > params.budget(i):  # a turn over the token budget is cut like any other: not gold
                out.append(Completion(text="", token_ids=ids[: params.budget(i)],
                                      logprobs=[0.0] * params.budget(i), finish_reason="length"))
                continue
            out.append(Completion(text=text, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop"))
        return out


class EncodedGoldPolicy(GoldPolicy):
    """A GoldPolicy that speaks the trained policy's tokens: each turn encoded by its tokenizer and ended with
    its end-of-turn token, the conversation rendered by its chat template; it stands in for the trained policy
    wherever the env loop reads a trainable policy's tokenizer, end tokens and context."""

    def __init__(self, plans: Sequence[GoldPlan], encoder: Any, name: str = "gold") -> None:
        super().__init__(plans, name)
        self.encoder = encoder

    model = property(lambda self: self.encoder.model)
    tokenizer = property(lambda self: self.encoder.tokenizer)
    pad_id = property(lambda self: self.encoder.pad_id)
    eos_ids = property(lambda self: self.encoder.eos_ids)
    max_context = property(lambda self: self.encoder.max_context)
    generation_version = property(lambda self: self.version)

    def separate_weights(self) -> None:
        """Nothing to separate: the turns are given."""

    def sync_weights(self, weights: Any = None, version: int | None = None) -> float | None:
        return None

    def render(self, conversation: Sequence[Message], add_generation_prompt: bool = True, **kw: Any) -> str:
        return self.encoder.render(conversation, add_generation_prompt=add_generation_prompt, **kw)

    def encode(self, text: str) -> list[int]:
        return self.encoder.encode(text)

    def _tokens(self, text: str) -> list[int]:
        return self.encoder.encode(text) + [self._end]

    @functools.cached_property
    def _end(self) -> int:
        """The token that ends an assistant turn: the tokenizer's eos token where it is one of the end ids
        (the one the chat template writes after a message), else the smallest of them."""
        eos = getattr(self.encoder.tokenizer, "eos_token_id", None)
        return eos if eos in self.encoder.eos_ids else min(self.encoder.eos_ids)


def unmask_prefix(episode: Episode, turns: int) -> Episode:
    """`episode` with the loss mask of its first `turns` generated turns cleared (a recovery sample's replayed
    failure is context, not something to learn)."""
    mask = list(episode.loss_mask)
    runs = 0
    i = 0
    while i < len(mask) and runs < turns:
        if mask[i]:
            while i < len(mask) and mask[i]:
                mask[i] = 0
                i += 1
            runs += 1
        else:
            i += 1
    return episode.model_copy(update={"loss_mask": mask})


def play(plans: Sequence[GoldPlan], gold: Callable[[GoldPolicy], Any], *, encoder: Any = None,
         seed: int = 0) -> list[Episode]:
    """Play `plans` through the env with a gold policy (`gold(policy)` is the run's env loop on it)
    and keep the episodes that pass with no flag; a recovery plan's replayed turns are left out of the
    loss. A gold policy tells its conversations apart by their prompt, so plans whose tasks share a prompt
    (an attempts task's example fits several answers by design) play in separate rounds."""
    if not plans:
        return []
    rounds: list[list[GoldPlan]] = []
    seen: dict[str, int] = {}
    for plan in plans:
        r = seen[plan.task.prompt] = seen.get(plan.task.prompt, -1) + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(plan)
    episodes: list[Episode] = []
    for batch in rounds:
        policy = EncodedGoldPolicy(batch, encoder) if encoder is not None else GoldPolicy(batch)
        episodes += gold(policy).run([p.task for p in batch], 1, step=0, seed=seed)
    by_key = {p.task.key: p for p in plans}
    kept = []
    for ep in episodes:
        if not ep.passed or ep.masked or (ep.verdict is not None and ep.verdict.flags):
            continue
        plan = by_key.get(f"{ep.domain}/{ep.task_id}")
        kept.append(unmask_prefix(ep, len(plan.prefix)) if plan is not None and plan.prefix else ep)
    return kept
