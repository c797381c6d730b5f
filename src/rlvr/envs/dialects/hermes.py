"""`hermes`: `<tool_call>{json}</tool_call>`, rlvr's own text format, and the form of Qwen2.5, Qwen3 and
Hermes.

rlvr's own parser (`rlvr.envs.parse`) reads it, not a library's: it is the format every model without a tool
family is told to write (the built-in model, SmolLM2), its feedback names exactly what is wrong with a call,
and reading it never imports more than the standard library. A `<think>` block first in the turn (Qwen3, QwQ)
is reasoning: calls drafted inside it are not run.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr.envs.dialects.base import Dialect, Parsed, split_reasoning
from rlvr.envs.messages import ToolCall
from rlvr.envs.parse import CALL_RE, FORMAT_HINT, format_call, parse_text


class Hermes(Dialect):
    name = "hermes"
    models = ("Qwen2.5, Qwen3, QwQ, Hermes 2/3, SmolLM3; every model whose template has no tool form of its "
              "own (the built-in model, SmolLM2)")
    markers = ("<tool_call>", "</tool_call>", "<think>", "</think>")
    signature = ("<tool_call>",)
    history = ("ChatML templates print an assistant turn verbatim; Qwen3's and QwQ's drop the reasoning of "
               "turns before the last real user message (an Env feedback message rewrites earlier turns)")

    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None, *,
              id_prefix: str = "call") -> Parsed:
        reasoning, rest = split_reasoning(text)
        calls, errors = parse_text(rest, id_prefix)
        return Parsed(calls, errors, CALL_RE.sub("", rest).strip(), reasoning)

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        return format_call(call)

    @property
    def hint(self) -> str:
        return FORMAT_HINT
