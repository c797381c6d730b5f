"""The OpenAI Responses wire format of the gateway (`/v1/responses`): what Codex and the OpenAI Agents SDK's
default `Agent` speak, checked into a `Call` and shaped back.

Pure, like `wire`: `responses_request` validates a body (`instructions`; `input` as a string or items:
messages, `function_call` and `function_call_output`; function tools; `tool_choice`; `text.format`; log-probs
through `include` and `top_logprobs`) and raises `ApiError` in OpenAI's error body. The gateway keeps no
responses, so each request carries its whole input (`previous_response_id` is refused; `store` changes
nothing). `response_body` and `response_events` build the response and its streamed events (response.created,
the output items with their text and argument deltas, response.completed). """
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
    TokenInfo,
    Turn,
    bad,
    openai_error,
    refuse_unknown,
    unsupported,
)

NO_EFFECT = frozenset({"model", "user", "metadata", "client_metadata", "store", "service_tier",
                       "prompt_cache_key", "safety_identifier", "stream_options", "truncation", "background"})
"""Accepted, changing nothing in sampling: nothing is stored or run in the background, the context is never
truncated (a prompt past it is refused), the served model is the policy."""
FIELDS = NO_EFFECT | {"input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
                      "max_output_tokens", "temperature", "top_p", "stream", "include", "top_logprobs",
                      "reasoning", "previous_response_id", "max_tool_calls"}
"""Every Responses field the gateway honours or accepts; any other is refused with a 400."""
INCLUDES = {"message.output_text.logprobs", "reasoning.encrypted_content"}
"""`include` values served: log-probs, and encrypted reasoning (there is none to include)."""
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _options(body: dict[str, Any], call: Call) -> None:
    for name, neutral in (("truncation", "disabled"), ("background", False)):
        if body.get(name) not in (None, neutral):
            raise unsupported(name, f"only {neutral!r}: the gateway answers each call as it comes, whole")
    if body.get("previous_response_id"):
        raise unsupported("previous_response_id", "the gateway keeps no responses; send the whole input "
                                                  "(store: false)")
    reasoning = body.get("reasoning")
    if reasoning is not None and (not isinstance(reasoning, dict) or reasoning.get("effort") not in (None,
                                                                                                       "none")):
        raise unsupported("reasoning", "the policy has no reasoning effort to set (only null or "
                                       '{"effort": "none"})')
    include = body.get("include") or []
    if not isinstance(include, list) or any(i not in INCLUDES for i in include):
        raise unsupported("include", f"only {', '.join(sorted(INCLUDES))}, got {include!r}")
    call.logprobs = "message.output_text.logprobs" in include
    call.top_logprobs = wire.integer(body, "top_logprobs", 0, 20) or 0
    text = body.get("text") or {}
    if not isinstance(text, dict) or any(k not in ("format", "verbosity") for k in text):
        raise unsupported("text", f"only text.format is served, got {text!r}")
    if text.get("verbosity") not in (None, "medium"):
        raise unsupported("text.verbosity", "the policy has no verbosity to set")
    call.response_format = wire.response_format(text.get("format"), "text.format")


def _item(item: Any, i: int) -> Message:
    """One input item: a message, a function call (an assistant turn's) or a function call's output."""
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise bad(f"{where} must be an object", where)
    kind = item.get("type", "message")
    if kind == "message":
        if item.get("role") not in ROLES:
            raise bad(f"{where}.role must be one of {', '.join(ROLES)}, got {item.get('role')!r}", where)
        return Message(role=ROLES[item["role"]], content=wire.text_of(item.get("content"), where,
                                                                      ("input_text", "output_text", "text")))
    if kind == "function_call":
        call = ToolCall(id=str(item.get("call_id") or ""), name=str(item.get("name") or ""),
                        arguments=wire.arguments(item.get("arguments"), f"{where}.arguments"))
        return Message(role="assistant", tool_calls=[call])
    if kind == "function_call_output":
        out = item.get("output")
        text = out if isinstance(out, str) else wire.text_of(out, where, ("input_text", "output_text",
                                                                          "text"))
        return Message(role="tool", content=text, tool_call_id=str(item.get("call_id") or ""))
    if kind == "reasoning":
        return Message(role="assistant")  # the gateway sends no reasoning items; an empty one joins its turn
    raise unsupported(where, f"a {kind!r} item; the gateway reads messages, function_call and "
                             "function_call_output items")


def _turns(items: list[Message]) -> list[Message]:
    """Consecutive assistant items (a message, then its function calls) as one assistant turn."""
    out: list[Message] = []
    for m in items:
        if m.role == "assistant" and out and out[-1].role == "assistant" and (m.tool_calls or not m.content) \
                and not (out[-1].tool_calls and not m.tool_calls):
            last = out[-1]
            out[-1] = last.model_copy(update={"content": last.content + m.content,
                                              "tool_calls": [*last.tool_calls, *m.tool_calls]})
        else:
            out.append(m)
    return [m for m in out if m.role != "assistant" or m.content or m.tool_calls]


def _tool(t: Any, i: int) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(t, dict) or t.get("type") != "function":
        kind = t.get("type") if isinstance(t, dict) else t
        raise unsupported(where, f"{kind!r} tools are not served; only function tools")
    return wire.function_tool({"type": "function", "function": t}, where)


def responses_request(body: Any) -> Call:
    """A checked /v1/responses request."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    refuse_unknown(body, FIELDS, "Responses")
    call = Call(api="responses", model=str(body.get("model") or ""),
                max_tokens=wire.integer(body, "max_output_tokens", 1),
                temperature=wire.number(body, "temperature", 0, 2), top_p=wire.number(body, "top_p", 0, 1),
                stream=wire.flag(body, "stream"))
    _options(body, call)
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise bad("'input' must be a string or a non-empty list of items", "input")
    instructions = body.get("instructions")
    head = [Message(role="system", content=wire.text_of(instructions,
                                                        "instructions"))] if instructions else []
    call.messages = head + _turns([_item(x, i) for i, x in enumerate(items)])
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise bad("'tools' must be a list", "tools")
    call.tools = [_tool(t, i) for i, t in enumerate(tools)]
    call.tool_choice = wire.choice_of(body.get("tool_choice"), call.tools,
                                      lambda c: c.get("name") if isinstance(c, dict) else c)
    call.parallel_calls = body.get("parallel_tool_calls") is not False
    if body.get("max_tool_calls") is not None:
        wire.integer(body, "max_tool_calls", 1)
        call.parallel_calls = False if body["max_tool_calls"] == 1 else call.parallel_calls
    return call


# ---------------------------------------------------------------------------------------------- responses
def _logprobs(tokens: list[TokenInfo]) -> list[dict[str, Any]]:
    return [{"token": t.text, "logprob": t.logprob, "bytes": list(t.text.encode()),
             "top_logprobs": [{"token": a, "logprob": lp, "bytes": list(a.encode())} for a, lp in t.top]}
            for t in tokens]


def _text_item(head: Head, text: str, tokens: list[TokenInfo], status: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_" + head.id[5:], "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": _logprobs(tokens)}]}


def _call_item(c: ToolCall, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": "fc_" + c.id, "call_id": c.id, "name": c.name,
            "arguments": json.dumps(c.arguments), "status": status}


def _response(call: Call, head: Head, output: list[dict[str, Any]], t: Turn | None) -> dict[str, Any]:
    status = "in_progress" if t is None else "incomplete" if t.finish == "length" else "completed"
    usage = None if t is None else {
        "input_tokens": t.prompt_tokens, "output_tokens": t.completion_tokens,
        "total_tokens": t.prompt_tokens + t.completion_tokens, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0}}
    fmt = call.response_format or {"type": "text"}
    return {"id": head.id, "object": "response", "created_at": head.created, "status": status,
            "model": head.model, "output": output, "usage": usage, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": None, "max_output_tokens": call.max_tokens,
            "parallel_tool_calls": call.parallel_calls,
            "temperature": call.temperature, "top_p": call.top_p, "tool_choice": _choice(call),
            "tools": [{"type": "function", **t["function"]} for t in call.tools], "text": {"format": fmt},
            "metadata": {}, "store": False, "reasoning": None, "truncation": "disabled"}


def _choice(call: Call) -> Any:
    return {"type": "function", "name": call.tool_choice["name"]} if isinstance(call.tool_choice, dict) \
        else call.tool_choice


def _output(head: Head, t: Turn) -> list[dict[str, Any]]:
    text = [_text_item(head, t.content, t.tokens, "completed")] if t.content or not t.calls else []
    return text + [_call_item(c) for c in t.calls]


def response_body(call: Call, t: Turn) -> dict[str, Any]:
    head = Head(t.id, t.model, t.prompt_tokens, _now())
    return _response(call, head, _output(head, t), t)


def response_events(call: Call, head: Head, items: Iterator[Any]) -> Iterator[Event]:
    """Responses' streamed events: the message item's text as it is generated, then each function call
    item with its arguments, then response.completed with the whole response."""
    seq = iter(range(1 << 30))

    def ev(kind: str, **data: Any) -> Event:
        return kind, {"type": kind, "sequence_number": next(seq), **data}

    yield ev("response.created", response=_response(call, head, [], None))
    yield ev("response.in_progress", response=_response(call, head, [], None))
    item_id, sent, index, tokens = "msg_" + head.id[5:], "", 0, []
    opened = False
    for item in items:
        if isinstance(item, ApiError):
            yield ev("error", code=item.code, message=item.message, param=item.param)
            return
        text = item.text if isinstance(item, Piece) else item.content[len(sent):]
        if text and not opened:
            opened = True
            yield ev("response.output_item.added", output_index=0, item=_text_item(head, "", [],
                                                                                   "in_progress"))
            yield ev("response.content_part.added", item_id=item_id, output_index=0, content_index=0,
                     part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
        part_tokens = item.tokens if isinstance(item, Piece) else []
        tokens += part_tokens
        if text:
            sent += text
            yield ev("response.output_text.delta", item_id=item_id, output_index=0, content_index=0,
                     delta=text, logprobs=_logprobs(part_tokens) if call.logprobs else [])
        if isinstance(item, Piece):
            continue
        done_tokens = item.tokens if call.logprobs else []
        if opened:
            part = {"type": "output_text", "text": sent, "annotations": [],
                    "logprobs": _logprobs(done_tokens)}
            yield ev("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=sent,
                     logprobs=part["logprobs"])
            yield ev("response.content_part.done", item_id=item_id, output_index=0, content_index=0,
                     part=part)
            yield ev("response.output_item.done", output_index=0,
                     item=_text_item(head, sent, done_tokens, "completed"))
            index = 1
        for c in item.calls:
            yield ev("response.output_item.added", output_index=index, item={**_call_item(c, "in_progress"),
                                                                             "arguments": ""})
            yield ev("response.function_call_arguments.delta", item_id="fc_" + c.id, output_index=index,
                     delta=json.dumps(c.arguments))
            yield ev("response.function_call_arguments.done", item_id="fc_" + c.id, output_index=index,
                     name=c.name, arguments=json.dumps(c.arguments))
            yield ev("response.output_item.done", output_index=index, item=_call_item(c))
            index += 1
        final = "response.incomplete" if item.finish == "length" else "response.completed"
        yield ev(final, response=_response(call, head, _output(head, item), item))


def _now() -> int:
    import time

    return int(time.time())


RESPONSES = Api("responses", responses_request, response_body, response_events, openai_error, "resp_",
                "call_")
