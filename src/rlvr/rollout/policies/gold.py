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
the template's native schema when it has one). A turn's calls are in the model family's own form (its tool
dialect, `rlvr.envs.dialects`): the text the family's template writes for an assistant message with those
`tool_calls` where it writes them (`ChatTemplateCodec.template_turn`), else the dialect's `format_turn`; a
family whose turn ends at its first call (gpt-oss, Llama) gets one call a turn. Without an encoder (`rlvr
tasks sft-data`, which writes messages only) a token is a UTF-8 byte, as for `scripted`.

`recovery` turns a failed episode into a recovery sample: its own turns replayed up to the point it went wrong
(kept out of the loss), then the gold continuation from the state they left, played through the env.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.dialects import HERMES, Dialect
from rlvr.envs.messages import Message, ToolCall
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

    def next_turn(self, conversation: Sequence[Message], dialect: Dialect = HERMES) -> str:
        """The assistant's next turn given the conversation so far (its tool results included), as text in the
        model family's form (`dialect`)."""
        content, calls = self.next_action(conversation, single_call=dialect.single_call)
        return content if calls is None else dialect.format_turn(calls, content)

    def next_action(self, conversation: Sequence[Message], *, single_call: bool = False
                    ) -> tuple[str, list[ToolCall] | None]:
        """(text, calls) of the assistant's next turn; calls None: the text is the whole turn, as it is (a
        replayed turn, a single-turn answer). `single_call`: one call a turn, for a family whose turn ends at
        its call."""
        done = sum(m.role == "assistant" for m in conversation)
        if done < len(self.prefix):
            return self.prefix[done].content, None
        if self.task.attempts and self.attempts:  # after a replayed failure, straight to the reference
            answer = self.attempts[-1] if self.prefix else self.attempts[min(done, len(self.attempts) - 1)]
            return answer, None
        if not self.task.multi_turn:
            return self.gold.answer or "", None
        turns = self.turns(single_call)
        k = done - len(self.prefix)
        parts = turns[k] if k < len(turns) else [("submit", None)]
        leads = [self._lead(stage, conversation) for stage, i in parts if not i]
        calls = [c for stage, i in parts
                 for c in (self._calls(stage) if i is None else [self._calls(stage)[i]])]
        return "\n".join(leads), calls

    def stages(self) -> list[list[str]]:
        """The gold turns, each a list of stages: look (list the files, read the ones the fix changes, run the
        tests), write (the fix, then the tests again), submit; merged from the end when the turn budget is
        short. A recovery starts from its failed turns and goes straight to the fix."""
        turns = [[s] for s in self._order()]
        while len(turns) > self._room():
            last = turns.pop()
            turns[-1].extend(last)
        return turns

    def turns(self, single_call: bool = False) -> list[list[tuple[str, int | None]]]:
        """The gold turns as (stage, which of its calls; None: all); with `single_call`, one call a turn, the
        optional ones (reading, the first test run, then the last) left out while the turn budget is short,
        and the stages merged as `stages` does when even that does not fit."""
        if not single_call:
            return [[(s, None) for s in group] for group in self.stages()]
        steps = [(s, i) for s in self._order() for i in range(len(self._calls(s)))]
        optional = [st for st in steps if st[0] == "look" and self._calls("look")[st[1]].name != "run_tests"]
        optional += [st for st in steps
                     if st[0] in ("look", "write") and self._calls(st[0])[st[1]].name == "run_tests"]
        while len(steps) > self._room() and optional:
            steps.remove(optional.pop(0))
        return [[st] for st in steps] if len(steps) <= self._room() else self.turns(False)

    def _order(self) -> list[str]:
        return ["write", "submit"] if self.prefix else ["look", "write", "submit"]

    def _room(self) -> int:
        return max(1, self.task.limits.max_turns - len(self.prefix))

    def _calls(self, stage: str) -> list[ToolCall]:
        tests = [ToolCall(name="run_tests")] if has_tests(self.task) else []
        if stage == "look":
            reads = [ToolCall(name="read_file", arguments={"path": p})
                     for p in self.changed if p in self.task.workspace and p != TREE]
            return [ToolCall(name="list_files"), *reads, *tests]
        if stage == "write" and self.commands is not None:
            terminal = "bash" if "bash" in tools_for(self.task) else "run"
            return [ToolCall(name=terminal, arguments={"command": c}) for c in self.commands] + tests
        if stage == "write":
            writes = [ToolCall(name="write_file", arguments={"path": p, "content": c})
                      for p, c in self.changed.items()]
            return writes + tests
        answer = {"answer": self.gold.answer} if self.gold.answer is not None else {}
        return [ToolCall(name="submit", arguments=answer)]

    def _lead(self, stage: str, conversation: Sequence[Message]) -> str:
        if stage == "look":
            tests = has_tests(self.task)
            return "I'll look at the workspace" + (" and run the tests" if tests else "") + " first."
        if stage == "write" and self.commands is not None:
            return ("That did not work. I'll do it again, step by step." if self.prefix
                    else "I'll do it at the terminal.")
        if stage == "write":
            return self._reading(conversation)
        passed = self._last_tests(conversation) == "passed"
        return "The tests pass now. Submitting." if passed else "Submitting."

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

    def __init__(self, plans: Sequence[GoldPlan], name: str = "gold", dialect: Dialect = HERMES) -> None:
        self._plans: dict[str, list[GoldPlan]] = {}
        for plan in plans:
            self._plans.setdefault(plan.task.prompt, []).append(plan)
        self.name = name
        self.version = 0
        self.dialect = dialect
        """The form the turns' calls are written in (the Env reads them with it)."""

    def _plan(self, conversation: Sequence[Message]) -> GoldPlan:
        prompt = next((m.content for m in conversation if m.role == "user"), "")
        found = self._plans.get(prompt)
        if not found:
            raise KeyError("no gold plan for this conversation's task")
        return found[0]

    def _turn(self, conversation: Sequence[Message]) -> tuple[str, list[int]]:
        """(text, token ids) of the next turn: here the dialect's text, a token a UTF-8 byte."""
        text = self._plan(conversation).next_turn(conversation, self.dialect)
        return text, list(text.encode("utf-8"))

    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        out = []
        for i, conv in enumerate(conversations):
            text, ids = self._turn(conv)
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
        super().__init__(plans, name, getattr(encoder, "dialect", None) or HERMES)
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

    def _turn(self, conversation: Sequence[Message]) -> tuple[str, list[int]]:
        """The next turn in the trained policy's tokens, ended by its end token: a turn with calls as the chat
        template writes it (`template_turn`), else in the dialect's form, closing first a reasoning block the
        generation prompt opened."""
        d = self.dialect
        content, calls = self._plan(conversation).next_action(conversation, single_call=d.single_call)
        if calls is None:
            return content, self._ended(self.encoder.encode(content), None)
        written = getattr(self.encoder, "template_turn", lambda *a: None)(conversation, content, calls)
        if written is not None:
            return written[0], self._ended(self.encoder.encode(written[0]), written[1] or d.turn_end)
        text = d.format_turn(calls, content)
        if d.think is not None and self.encoder.render(conversation).rstrip().endswith(d.think[0]):
            text = f"\n{d.think[1]}\n\n{text}"  # an empty block, as the templates write one
        return text, self._ended(self.encoder.encode(text), d.turn_end if calls else None)

    def _ended(self, ids: list[int], end: str | None) -> list[int]:
        """`ids` closed by the end token `end` (else the turn's usual one), unless they end with one."""
        if ids and ids[-1] in self.encoder.eos_ids:
            return ids
        tok = self.encoder.tokenizer
        chosen = tok.convert_tokens_to_ids(end) if end is not None else None
        return ids + [chosen if isinstance(chosen, int) and chosen in self.encoder.eos_ids else self._end]

    @functools.cached_property
    def _end(self) -> int:
        """The token that ends an assistant turn: the tokenizer's eos token where it is one of the end ids
        (the one the chat template writes after a message), else the smallest of them."""
        eos = getattr(self.encoder.tokenizer, "eos_token_id", None)
        return eos if eos in self.encoder.eos_ids else min(self.encoder.eos_ids)


def unmask_prefix(episode: Episode, turns: int) -> Episode:
    """`episode` with the loss mask of its first `turns` generated turns cleared (a recovery sample's replayed
    failure is context, not something to learn), in its segments first where its record started over."""
    left = [turns]

    def clear(mask: list[int]) -> list[int]:
        out, i = list(mask), 0
        while i < len(out) and left[0] > 0:
            if out[i]:
                while i < len(out) and out[i]:
                    out[i] = 0
                    i += 1
                left[0] -= 1
            else:
                i += 1
        return out

    segments = [{**seg, "loss_mask": clear(seg["loss_mask"])}
                for seg in episode.metadata.get("segments") or []]
    update: dict[str, Any] = {"loss_mask": clear(episode.loss_mask)}
    if segments:
        update["metadata"] = {**episode.metadata, "segments": segments}
    return episode.model_copy(update=update)


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
