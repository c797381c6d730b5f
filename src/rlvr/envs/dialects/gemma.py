"""`gemma4`: Gemma 4's `<|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>`, with
`<|channel>thought ...<channel|>` reasoning, parsed by `renderers`' Gemma 4 parser.

Gemma 4's template renders a tool's result inside the model's own turn, found from the assistant message's
`tool_calls` (a result is matched to its call by id), so an earlier turn goes to it as `tool_calls`; and it
writes an assistant message's text after the results of its calls, where the model writes it before them.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.envs.dialects.library import LibraryDialect, MarkerTokenizer, load
from rlvr.envs.messages import Message, ToolCall

QUOTE = '<|"|>'
"""Gemma 4's string delimiter (one special token)."""
GEMMA_MARKERS = ("<bos>", "<eos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool>",
                 "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", QUOTE,
                 "<|image>", "<|image|>", "<image|>")


def gemma_value(value: Any) -> str:
    """An argument as Gemma 4's template writes it: strings between quote tokens, mappings with their keys
    sorted and bare, booleans as true/false, other scalars as JSON."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_value(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(gemma_value(v) for v in value) + "]"
    return json.dumps(value)


class Gemma4(LibraryDialect):
    name = "gemma4"
    models = "Gemma 4"
    markers = ("<|tool_call>", "<tool_call|>", QUOTE, "<|channel>", "<channel|>")
    signature = ("<|tool_call>", "<tool_call|>")
    think = None  # reasoning is a channel: <|channel>thought\n...<channel|>
    history = ("the template renders tool results inside the model's turn from its `tool_calls`, and an "
               "assistant message's text after them, where the model writes text before its results: a turn "
               "with text and calls starts a new segment at the next turn")

    def parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        tok = MarkerTokenizer(GEMMA_MARKERS)
        renderer = load("gemma4").Gemma4Renderer(tok)
        return tok, lambda ids, tools: renderer.parse_response(ids, tools=tools)

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        args = ",".join(f"{k}:{gemma_value(v)}" for k, v in sorted(call.arguments.items()))
        return f"<|tool_call>call:{call.name}{{{args}}}<tool_call|>"

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        return content + "".join(self.format_call(c) for c in calls)

    def message_dict(self, message: Message) -> dict[str, Any]:
        parsed = self.parse(message.content)  # its tool results are rendered from the calls
        return self.structured(parsed.content, parsed.calls, parsed.reasoning)

    def structured(self, content: str, calls: Sequence[ToolCall],
                   reasoning: str | None = None) -> dict[str, Any]:
        out = super().structured(content, calls)
        if reasoning:
            out["reasoning"] = reasoning
        return out
