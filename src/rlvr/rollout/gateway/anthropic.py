"""The Anthropic Messages wire format of the gateway (`/v1/messages`): what Claude Code and the `anthropic`
SDK speak, checked into a `Call` and shaped back.

Pure, like `wire`: `messages_request` validates a body (system prompt as a string or text blocks; user turns
of text and `tool_result` blocks; assistant turns of text and `tool_use` blocks; function tools with an
`input_schema`; `tool_choice` auto, any, tool or none) and raises `ApiError`, rendered as Anthropic's
`{"type": "error", "error": {...}}`. `message_response` and `message_events` build the reply and its streamed
form in Anthropic's event sequence (message_start, content_block_start/delta/stop per block, message_delta,
message_stop). Every field is honoured or refused (`FIELDS`); Messages has no log-probs, so none are asked.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rlvr.envs.messages import Message, ToolCall
from rlvr.rollout.gateway import wire
from rlvr.rollout.gateway.convert import (
    Api,
    ApiError,
    Call,
    Event,
    Head,
    Piece,
    Turn,
    bad,
    refuse_unknown,
    unsupported,
)

NO_EFFECT = frozenset({"model", "metadata", "service_tier", "stream"})
"""Accepted, changing nothing in sampling (`stream` is read, and changes only the delivery)."""
FIELDS = NO_EFFECT | {"messages", "system", "max_tokens", "temperature", "top_p", "top_k", "stop_sequences",
                      "tools", "tool_choice", "thinking", "output_config", "context_management"}
"""Every Messages field the gateway honours or accepts; any other is refused with a 400."""
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def error_body(exc: ApiError) -> dict[str, Any]:
    """Anthropic's error body."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(exc.status, "api_error"),
                                       "message": exc.message}}


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise bad(f"{where}.content must be a string or a list of content blocks", f"{where}.content")
    return content


def _tool_result(block: dict[str, Any], where: str) -> Message:
    content = block.get("content")
    text = wire.text_of(content, where, ("text",)) if not isinstance(content, str) else content
    if block.get("is_error"):
        text = "error: " + text
    return Message(role="tool", content=text, tool_call_id=str(block.get("tool_use_id") or ""))


def _turn(m: Any, i: int) -> list[Message]:
    """One Messages turn as rlvr messages: a user turn's tool results (each a tool message) before its
    text."""
    where = f"messages[{i}]"
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
        got = m.get("role") if isinstance(m, dict) else m
        raise bad(f"{where}.role must be user, assistant or system, got {got!r}", f"{where}.role")
    if m["role"] == "system":  # a system message between turns (Claude Code's environment notes)
        return [Message(role="system", content=wire.text_of(m.get("content"), where, ("text",)))]
    texts: list[str] = []
    results: list[Message] = []
    calls: list[ToolCall] = []
    for j, b in enumerate(_blocks(m.get("content"), where)):
        kind, at = b.get("type"), f"{where}.content[{j}]"
        if kind == "text":
            texts.append(str(b.get("text", "")))
        elif kind == "tool_result" and m["role"] == "user":
            results.append(_tool_result(b, at))
        elif kind == "tool_use" and m["role"] == "assistant":
            if not isinstance(b.get("input", {}), dict):
                raise bad(f"{at}.input must be an object", at)
            calls.append(ToolCall(id=str(b.get("id") or ""), name=str(b.get("name") or ""),
                                  arguments=b.get("input") or {}))
        elif kind in ("thinking", "redacted_thinking") and m["role"] == "assistant":
            continue  # the gateway never sends thinking blocks; one a client made up is not the model's text
        else:
            raise unsupported(at, f"a {kind!r} block in a {m['role']} turn; this policy reads text, tool_use "
                                  "and tool_result blocks")
    text = "".join(texts)
    if m["role"] == "assistant":
        return [Message(role="assistant", content=text, tool_calls=calls)]
    return results + ([Message(role="user", content=text)] if text or not results else [])


def _tool(t: Any, i: int) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
        raise bad(f'{where} must be {{"name": ..., "input_schema": {{...}}}}', where)
    if t.get("type") not in (None, "custom"):
        raise unsupported(where, f"{t['type']!r} is a server tool; only client tools with an input_schema")
    schema = t.get("input_schema")
    if not isinstance(schema, dict):
        raise bad(f"{where}.input_schema must be a JSON schema object", where)
    return {"type": "function", "function": {"name": t["name"], "description": t.get("description") or "",
                                             "parameters": schema}}


def _choice(body: dict[str, Any], call: Call) -> None:
    choice = body.get("tool_choice") or {"type": "auto"}
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise bad(f"'tool_choice' must be auto, any, tool or none, got {choice!r}", "tool_choice")
    kind = {"any": "required"}.get(choice["type"], choice["type"])
    call.tool_choice = wire.choice_of(kind if kind != "tool" else choice, call.tools,
                                      lambda c: c.get("name"))
    call.parallel_calls = not choice.get("disable_parallel_tool_use", False)


def messages_request(body: Any) -> Call:
    """A checked /v1/messages request."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    refuse_unknown(body, FIELDS, "Messages")
    if body.get("top_k") is not None:
        raise unsupported("top_k",
                          "the policy samples from its whole nucleus (top_p), as the trainer assumes")
    _thinking(body)
    max_tokens = wire.integer(body, "max_tokens", 1)
    if max_tokens is None:
        raise bad("'max_tokens' is required", "max_tokens")
    call = Call(api="messages", model=str(body.get("model") or ""), max_tokens=max_tokens,
                temperature=wire.number(body, "temperature", 0, 1), top_p=wire.number(body, "top_p", 0, 1),
                stop=wire.stops(body.get("stop_sequences"), "stop_sequences", 16), stream=wire.flag(body,
                                                                                                    "stream"))
    system = body.get("system")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list of messages", "messages")
    head = [Message(role="system", content=wire.text_of(system, "system", ("text",)))] if system else []
    call.messages = head + [x for i, m in enumerate(msgs) for x in _turn(m, i)]
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise bad("'tools' must be a list", "tools")
    # a deferred tool stays out of the model's context until the client loads it (Anthropic's tool search)
    call.tools = [_tool(t, i) for i, t in enumerate(tools)
                  if not (isinstance(t, dict) and t.get("defer_loading"))]
    _choice(body, call)
    call.response_format = _output_format(body)
    return call


def _thinking(body: dict[str, Any]) -> None:
    """Thinking disabled, or adaptive (the model decides, and this policy writes no thinking blocks); a
    thinking budget to spend is refused. Context edits that clear thinking blocks have none to clear here; any
    other edit would rewrite the prompt server-side, and is refused."""
    thinking = body.get("thinking")
    if thinking is not None and (not isinstance(thinking, dict) or thinking.get("type") not in ("disabled",
                                                                                                "adaptive")):
        raise unsupported("thinking", "the policy has no extended-thinking budget to spend (only disabled "
                                      "or adaptive)")
    edits = (body.get("context_management") or {}).get("edits") or []
    if any(not isinstance(e, dict) or not str(e.get("type", "")).startswith("clear_thinking") for e in edits):
        raise unsupported("context_management", "only clear_thinking edits (the gateway keeps the history "
                                                "as sent; it never sends thinking blocks)")


def _output_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """`output_config`: its `format` (a JSON schema) constrains the turn; `effort` changes nothing for a
    policy that has no effort setting (its turn is sampled the same whatever the effort)."""
    cfg = body.get("output_config") or {}
    if not isinstance(cfg, dict) or any(k not in ("effort", "format") for k in cfg):
        raise unsupported("output_config", f"only effort and format, got {cfg!r}")
    return wire.response_format(cfg.get("format"), "output_config.format")


# ---------------------------------------------------------------------------------------------- responses
def _usage(prompt: int, output: int) -> dict[str, Any]:
    return {"input_tokens": prompt, "output_tokens": output, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def _message(head: Head, content: list[dict[str, Any]], stop: str | None, stop_sequence: str | None,
             output: int) -> dict[str, Any]:
    return {"id": head.id, "type": "message", "role": "assistant", "model": head.model, "content": content,
            "stop_reason": stop, "stop_sequence": stop_sequence, "usage": _usage(head.prompt_tokens, output)}


def _stop(t: Turn) -> str:
    return "stop_sequence" if t.stop_sequence else STOP_REASONS[t.finish]


def _tool_use(c: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}


def message_response(call: Call, t: Turn) -> dict[str, Any]:
    content = ([{"type": "text", "text": t.content}] if t.content or not t.calls else []) + [
        _tool_use(c) for c in t.calls]
    return _message(Head(t.id, t.model, t.prompt_tokens, 0), content, _stop(t), t.stop_sequence,
                    t.completion_tokens)


def message_events(call: Call, head: Head, items: Iterator[Any]) -> Iterator[Event]:
    """Anthropic's event sequence: the text block streamed as it is generated, then each tool_use block with
    its input as one JSON delta, then the stop reason and usage."""
    yield "message_start", {"type": "message_start", "message": _message(head, [], None, None, 0)}
    index, sent, text_open = 0, 0, False
    for item in items:
        if isinstance(item, ApiError):
            yield "error", error_body(item)
            return
        text = item.text if isinstance(item, Piece) else item.content[sent:]
        if text and not text_open:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            text_open = True
        if text:
            sent += len(text)
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": text}}
        if isinstance(item, Piece):
            continue
        if text_open:
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        for c in item.calls:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**_tool_use(c), "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "input_json_delta",
                                                    "partial_json": json.dumps(c.arguments)}}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        yield "message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": _stop(item), "stop_sequence": item.stop_sequence},
                                "usage": {"output_tokens": item.completion_tokens}}
        yield "message_stop", {"type": "message_stop"}


MESSAGES = Api("messages", messages_request, message_response, message_events, error_body, "msg_", "toolu_")
