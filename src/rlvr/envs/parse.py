"""Tool calls from model output: rlvr's own text format (the `hermes` dialect), and OpenAI-style `tool_calls`.

Text format (one or more per message)::

    <tool_call>{"name": "read_file", "arguments": {"path": "solution.py"}}</tool_call>

The body is one JSON object with a string `name` and an object `arguments` (a JSON string holding an object is
accepted too, as OpenAI servers send it). A malformed call is reported back to the model, never raised. The
forms of other model families are read by `rlvr.envs.dialects`.
"""
from __future__ import annotations

import json
import re
from typing import Any

from rlvr.envs.messages import ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
CALL_RE = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
FORMAT_HINT = f'{OPEN}{{"name": "TOOL", "arguments": {{...}}}}{CLOSE}'


def arguments_of(raw: Any) -> dict[str, Any]:
    """Call arguments as an object: a dict, a JSON string holding one, or nothing; raises ValueError saying
    what is wrong otherwise."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise ValueError("arguments are nested too deeply") from None
    if not isinstance(raw, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def call_from_json(obj: Any, call_id: str) -> ToolCall:
    """One call from a decoded JSON object; raises ValueError saying what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError(f"a tool call must be a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a tool call needs a string 'name'")
    return ToolCall(id=call_id, name=name, arguments=arguments_of(obj.get("arguments",
                                                                          obj.get("parameters"))))


def parse_text(text: str, id_prefix: str = "call") -> tuple[list[ToolCall], list[str]]:
    """Calls in `text` and one error message per malformed call."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for n, m in enumerate(CALL_RE.finditer(text)):
        try:
            obj = json.loads(m.group(1).strip())
        except json.JSONDecodeError as exc:
            errors.append(f"tool call {n + 1} is not valid JSON ({exc.msg} at column {exc.colno}); "
                          f"write {FORMAT_HINT}")
            continue
        except RecursionError:
            errors.append(f"tool call {n + 1} is nested too deeply; write {FORMAT_HINT}")
            continue
        try:
            calls.append(call_from_json(obj, f"{id_prefix}_{n}"))
        except ValueError as exc:
            errors.append(f"tool call {n + 1}: {exc}; write {FORMAT_HINT}")
    tail = CALL_RE.sub("", text)
    if OPEN in tail:
        errors.append(f"a {OPEN} is never closed with {CLOSE}; write {FORMAT_HINT}")
    return calls, errors


def parse_openai(tool_calls: list[dict[str, Any]]) -> tuple[list[ToolCall], list[str]]:
    """Calls from an OpenAI chat message's `tool_calls` list."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for n, tc in enumerate(tool_calls):
        fn = tc.get("function") if isinstance(tc, dict) else None
        try:
            calls.append(call_from_json(fn, str(tc.get("id") or f"call_{n}") if isinstance(tc, dict) else ""))
        except ValueError as exc:
            errors.append(f"tool call {n + 1}: {exc}")
    return calls, errors


def format_call(call: ToolCall) -> str:
    """A call in the text format (for scripted actions and transcripts)."""
    return f"{OPEN}{json.dumps({'name': call.name, 'arguments': call.arguments})}{CLOSE}"
