"""`llama3`: Llama 3.1 / 3.2 / 3.3 JSON tool calls, `{"name": ..., "parameters": {...}}`, optionally after
`<|python_tag|>`, several separated by `;`.

rlvr's own parser: `renderers`' Llama 3 parser reads one bare JSON object only, and returns a call after
`<|python_tag|>`, or two calls separated by `;`, as plain content with no call and no error
(docs/DIALECTS.md). The rules here are vLLM's `llama3_json` parser's: a turn that starts with `{` or
`<|python_tag|>` is a call attempt.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rlvr.envs.dialects.base import Dialect, Parsed, call_id
from rlvr.envs.messages import ToolCall
from rlvr.envs.parse import call_from_json

PYTHON_TAG = "<|python_tag|>"


class Llama3(Dialect):
    name = "llama3"
    models = "Llama 3.1, 3.2 and 3.3 (JSON tool calling)"
    markers = (PYTHON_TAG,)
    signature = ("<|start_header_id|>", '"parameters"')
    single_call = True
    think = None
    history = ("the template prints an assistant turn's text trimmed, and ends every turn with `<|eot_id|>` "
               "where a python-tag call ends with `<|eom_id|>`: the record keeps the `<|eom_id|>` it sampled")

    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None, *,
              id_prefix: str = "call") -> Parsed:
        body = text.strip()
        tagged = body.startswith(PYTHON_TAG)
        body = body.removeprefix(PYTHON_TAG).lstrip()
        if not (tagged or (body.startswith("{") and ('"name"' in body or '"parameters"' in body))):
            return Parsed(content=text.strip())
        calls: list[ToolCall] = []
        errors: list[str] = []
        decoder, pos, n = json.JSONDecoder(), 0, 0
        while pos < len(body):
            try:
                obj, end = decoder.raw_decode(body, pos)
            except json.JSONDecodeError as exc:
                errors.append(self.call_error(n + 1, f"is not valid JSON ({exc.msg} at column {exc.colno})"))
                break
            except RecursionError:
                errors.append(self.call_error(n + 1, "is nested too deeply"))
                break
            try:
                calls.append(call_from_json(obj, call_id(id_prefix, n)))
            except ValueError as exc:
                errors.append(self.call_error(n + 1, f"is not a call ({exc})"))
            n += 1
            pos = end
            while pos < len(body) and body[pos] in " \t\r\n;":
                pos += 1
            if pos < len(body) and body[pos] != "{":
                return Parsed(calls, errors, body[pos:].strip())  # text after the calls is content
        return Parsed(calls, errors, "")

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        return json.dumps({"name": call.name, "parameters": call.arguments}, ensure_ascii=False)

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """The calls alone when there are any (the template renders no text beside a call), `;`-separated."""
        return "; ".join(self.format_call(c) for c in calls) if calls else content
