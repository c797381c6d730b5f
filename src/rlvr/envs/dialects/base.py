"""What a tool dialect is: how one model family writes tool calls and reasoning in its own text, read and
written.

A dialect parses a model turn into calls, malformed-call errors, visible content and reasoning; writes calls
in the family's own form (gold trajectories, transcripts, the hint of malformed-call feedback); says whether a
chat template is the family's; and tells the renderer how the family's template takes an earlier assistant
turn.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.parse import arguments_of

__all__ = ["THINK", "Dialect", "Parsed", "arguments_of", "call_id", "openai_calls", "split_reasoning"]

THINK = ("<think>", "</think>")
"""The reasoning block most families write first in a turn."""


@dataclass(frozen=True)
class Parsed:
    """One model turn read by a dialect."""

    calls: list[ToolCall] = field(default_factory=list)
    """The well-formed calls, in order."""
    errors: list[str] = field(default_factory=list)
    """One message per malformed call, in the family's own form (the Env sends them back to the model)."""
    content: str = ""
    """The visible text: neither the calls nor the reasoning."""
    reasoning: str | None = None
    """The reasoning block's text, when the turn has one."""


def split_reasoning(text: str, think: tuple[str, str] = THINK) -> tuple[str | None, str]:
    """(reasoning, rest) of a turn that opens with a reasoning block, or that closes one its generation prompt
    opened (the text then starts inside it); (None, text) otherwise. An unclosed block is all reasoning."""
    opener, closer = think
    head = text.lstrip()
    if head.startswith(opener):
        body = head[len(opener):]
        if closer not in body:
            return body.strip(), ""
        reasoning, _, rest = body.partition(closer)
        return reasoning.strip(), rest
    if closer in text and opener not in text.split(closer, 1)[0]:
        reasoning, _, rest = text.partition(closer)
        return reasoning.strip(), rest
    return None, text


class Dialect(ABC):
    """One family's tool-call form. Subclasses set the class attributes and implement `parse` and
    `format_call`."""

    name: str = ""
    """The registry name (`policy.tool_format`)."""
    models: str = ""
    """The models that write this form (documentation)."""
    markers: tuple[str, ...] = ()
    """Special-token strings of the family's grammar: a backend keeps them in a turn's decoded text (other
    special tokens are dropped) and leaves them intact in the model's own turns when it renders history."""
    signature: tuple[str, ...] = ()
    """Strings that all appear in a chat template of this family (`detect`)."""
    history: str = ""
    """How the family's template renders earlier assistant turns, and so where an episode's token record
    starts a new segment (docs/DIALECTS.md)."""
    single_call: bool = False
    """True when a turn of this family ends at its first call (gold trajectories then write one call a
    turn)."""
    user_after_calls: bool = True
    """False when the family's template refuses a user message right after a turn with calls (Mistral's strict
    alternation): the Env then puts malformed-call errors into the first tool result instead."""
    think: tuple[str, str] | None = THINK
    """The family's reasoning block markers (None: it has none, or another form of reasoning: harmony's
    analysis channel). A turn may start inside a block its generation prompt opened, and then closes it."""
    turn_end: str | None = None
    """The end token of a turn whose calls the family closes with a token of their own (harmony's `<|call|>`),
    which a gold turn then ends with instead of the tokenizer's eos."""

    # ------------------------------------------------------------------------------------------- reading
    def detect(self, template: str) -> bool:
        """True when `template` (a chat template's source) writes this family's tool calls."""
        return bool(self.signature) and all(s in template for s in self.signature)

    @abstractmethod
    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None, *,
              id_prefix: str = "call") -> Parsed:
        """The calls, errors, content and reasoning of one model turn. `tools` (OpenAI tool specs) lets a
        family whose arguments are untyped text (XML forms) keep a string parameter a string."""

    def call_error(self, n: int, why: str) -> str:
        """The message for malformed call number `n` (1-based), ending with how to write one."""
        return f"tool call {n} {why}; write {self.hint}"

    # ------------------------------------------------------------------------------------------- writing
    @abstractmethod
    def format_call(self, call: ToolCall, index: int = 0) -> str:
        """One call in the family's form (`index`: its place in the turn)."""

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """A whole assistant turn: its text, then its calls, as the model writes them."""
        body = "\n".join(self.format_call(c, i) for i, c in enumerate(calls))
        return "\n".join(p for p in (content, body) if p)

    @property
    def hint(self) -> str:
        """A turn with one call in the family's form, as malformed-call feedback shows it."""
        return self.format_turn([ToolCall(name="TOOL", arguments={"ARG": "VALUE"})])

    def message_dict(self, message: Message) -> dict[str, Any]:
        """An assistant turn of the history as the family's chat template should get it. The default: the text
        as the model wrote it, which a template that prints an assistant's content verbatim renders exactly as
        sampled; a family whose template must see the calls as `tool_calls` parses it into `structured`."""
        return {"role": "assistant", "content": message.content}

    def structured(self, content: str, calls: Sequence[ToolCall],
                   reasoning: str | None = None) -> dict[str, Any]:
        """An assistant turn as a chat-template message with `tool_calls` (how a template writes the family's
        canonical form: gold trajectories take their turns from it)."""
        out: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            out["tool_calls"] = openai_calls(calls)
        if reasoning:
            out["reasoning_content"] = reasoning
        return out

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"


def openai_calls(calls: Sequence[ToolCall], *, string_arguments: bool = False) -> list[dict[str, Any]]:
    """Calls as chat-template `tool_calls` (arguments an object, or a JSON string where a template joins
    them)."""
    def args(c: ToolCall) -> Any:
        return json.dumps(c.arguments, ensure_ascii=False) if string_arguments else c.arguments

    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args(c)}}
            for c in calls]


def call_id(prefix: str, n: int) -> str:
    """The id of call `n` of a turn, when the family's form carries none."""
    return f"{prefix}_{n}"
