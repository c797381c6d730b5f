"""The OpenAI wire format of the gateway: chat completions and completions, checked into a `Call` and shaped
back.

Everything here is pure (no policy, no sockets): `chat_request` and `completion_request` validate a decoded
JSON body and raise `ApiError` (rendered as OpenAI's `{"error": {...}}`) naming the parameter at fault; every
field is honoured or refused (`CHAT_FIELDS`); `chat_response`, `chat_chunks` and their completion counterparts
build what the OpenAI SDK expects back. The numbers and lists the three APIs share are checked here too. """
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.parse import arguments_of
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

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
         "function": "tool"}
"""OpenAI roles -> rlvr roles (`developer` is the newer name of `system`)."""

NO_EFFECT = frozenset({"model", "user", "metadata", "store", "service_tier", "prompt_cache_key",
                       "safety_identifier", "stream_options"})
"""Fields accepted that change nothing in sampling (the served model is the policy, whatever `model` says;
nothing is stored; there is one tier)."""
CHAT_FIELDS = NO_EFFECT | {"messages", "tools", "tool_choice", "parallel_tool_calls", "response_format",
                           "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed", "n",
                           "stream", "logprobs", "top_logprobs", "frequency_penalty", "presence_penalty",
                           "logit_bias", "modalities", "reasoning_effort"}
"""Every chat-completions field the gateway honours or accepts; any other is refused with a 400."""
COMPLETION_FIELDS = NO_EFFECT | {"prompt", "max_tokens", "temperature", "top_p", "stop", "seed", "n",
                                 "stream",
                                 "logprobs", "echo", "best_of", "frequency_penalty", "presence_penalty",
                                 "logit_bias", "suffix"}


# ------------------------------------------------------------------------------------------- shared checks
def number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise bad(f"'{name}' must be a number from {lo:g} to {hi:g}, got {v!r}", name)
    return float(v)


def integer(body: dict[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        span = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
        raise bad(f"'{name}' must be an integer {span}, got {v!r}", name)
    return v


def flag(body: dict[str, Any], name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise bad(f"'{name}' must be a boolean, got {v!r}", name)
    return v


def stops(value: Any, name: str, most: int) -> tuple[str, ...]:
    out = (value,) if isinstance(value, str) else tuple(value or ())
    if not all(isinstance(s, str) and s for s in out) or len(out) > most:
        raise bad(f"'{name}' must be a string or a list of up to {most} non-empty strings, got {value!r}",
                  name)
    return out


def no_penalties(body: dict[str, Any]) -> None:
    """Penalties and biases would change the distribution the trainer recomputes: only their neutral
    values."""
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name) not in (None, 0, 0.0):
            raise unsupported(name, "it would sample from a distribution other than the policy's (only 0)")
    if body.get("logit_bias"):
        raise unsupported("logit_bias", "it would sample from a distribution other than the policy's")


def function_tool(t: Any, where: str) -> dict[str, Any]:
    """A checked function tool as an OpenAI chat spec."""
    fn = t.get("function") if isinstance(t, dict) else None
    if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict) \
            or not isinstance(fn.get("name"), str) or not fn["name"]:
        if isinstance(t, dict) and t.get("type") not in (None, "function"):
            raise unsupported(where, f"{t.get('type')!r} tools are not served; only function tools")
        raise bad(f'{where} must be {{"type": "function", "function": {{"name": ..., '
                  '"parameters": {...}}}', where)
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise bad(f"{where}.function.parameters must be a JSON schema object", where)
    return {"type": "function", "function": {"name": fn["name"], "description": fn.get("description") or "",
                                             "parameters": params or {"type": "object", "properties": {}}}}


def choice_of(choice: Any, tools: list[dict[str, Any]], name_of: Any, param: str = "tool_choice") -> Any:
    """auto, none, required, or {"name": N} for a named tool that is in `tools`."""
    if choice in (None, "auto", "none", "required"):
        if choice == "required" and not tools:
            raise bad(f"'{param}' is 'required' but no 'tools' are given", param)
        return choice or "auto"
    name = name_of(choice)
    if not isinstance(name, str) or name not in {t["function"]["name"] for t in tools}:
        raise bad(f"'{param}' names the function {name!r}, which is not in 'tools'", param)
    return {"name": name}


def response_format(fmt: Any, param: str) -> dict[str, Any] | None:
    """None for text, else {"type": "json_object"} or {"type": "json_schema", "schema": {...}}."""
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = fmt.get("json_schema", fmt)  # chat nests it; Responses' text.format does not
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise bad(f"'{param}' json_schema needs a 'schema' object", param)
        return {"type": "json_schema", "schema": schema}
    raise bad(f"'{param}' must be text, json_object or json_schema, got {fmt!r}", param)


def text_of(content: Any, where: str, kinds: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    """A message content as text: a string, or a list of text parts (other parts are refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in kinds:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise unsupported(f"{where}.content", f"{where}.content[{i}] is a {kind!r} part; this policy "
                                                      "reads text parts only")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise bad(f"{where}.content must be a string or a list of text parts", f"{where}.content")


def arguments(raw: Any, where: str) -> dict[str, Any]:
    try:
        return arguments_of(raw)
    except ValueError as exc:
        raise bad(f"{where}: {exc}", where) from None


# ------------------------------------------------------------------------------------------------ requests
def _common(body: Any, known: frozenset[str], api: str) -> Call:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    refuse_unknown(body, known, api)
    no_penalties(body)
    if not isinstance(body.get("model", ""), str):
        raise bad(f"'model' must be a string, got {body['model']!r}", "model")
    if body.get("n", 1) not in (1, None):
        raise bad("'n' must be 1 here (each choice would be its own sample of the episode), "
                  f"got {body['n']!r}", "n")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    max_tokens = integer(body, "max_completion_tokens", 1)
    return Call(api=api, model=body.get("model") or "",
                max_tokens=max_tokens if max_tokens is not None else integer(body, "max_tokens", 1),
                temperature=number(body, "temperature", 0, 2), top_p=number(body, "top_p", 0, 1),
                stop=stops(body.get("stop"), "stop", 4), seed=integer(body, "seed", -(1 << 63)),
                stream=flag(body, "stream"), include_usage=bool(opts.get("include_usage")))


def _message(m: Any, i: int) -> Message:
    where = f"messages[{i}]"
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        got = m.get("role") if isinstance(m, dict) else m
        raise bad(f"{where}.role must be one of {', '.join(ROLES)}, got {got!r}", f"{where}.role")
    role = ROLES[m["role"]]
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list) or any(not isinstance(c, dict) or not isinstance(c.get("function"), dict)
                                          for c in calls):
        raise bad(f'{where}.tool_calls must be a list of {{"id", "type": "function", "function": {{"name", '
                  f'"arguments"}}}}', f"{where}.tool_calls")
    content = text_of(m.get("content"), where)
    if role == "tool":
        return Message(role="tool", content=content, tool_call_id=str(m.get("tool_call_id") or ""),
                       name=m.get("name"))
    tool_calls = [ToolCall(id=str(c.get("id") or ""), name=str(c["function"].get("name") or ""),
                           arguments=arguments(c["function"].get("arguments"), f"{where}.tool_calls[{j}]"))
                  for j, c in enumerate(calls)]
    return Message(role=role, content=content, tool_calls=tool_calls if role == "assistant" else [])


def chat_request(body: Any) -> Call:
    """A checked /v1/chat/completions request."""
    call = _common(body, CHAT_FIELDS, "chat")
    if body.get("modalities") not in (None, ["text"]):
        raise unsupported("modalities", "this policy writes text only")
    if body.get("reasoning_effort") is not None:
        raise unsupported("reasoning_effort", "the policy has no reasoning budget to set")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list of messages", "messages")
    call.messages = [_message(m, i) for i, m in enumerate(msgs)]
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise bad("'tools' must be a list", "tools")
    call.tools = [function_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]
    call.tool_choice = choice_of(body.get("tool_choice"), call.tools,
                                 lambda c: (c.get("function") or {}).get("name") if isinstance(c,
                                                                                               dict) else c)
    call.parallel_calls = body.get("parallel_tool_calls") is not False
    call.response_format = response_format(body.get("response_format"), "response_format")
    call.logprobs = flag(body, "logprobs")
    call.top_logprobs = integer(body, "top_logprobs", 0, 20) or 0
    if call.top_logprobs and not call.logprobs:
        raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return call


def completion_request(body: Any) -> Call:
    """A checked /v1/completions request (one prompt string)."""
    call = _common(body, COMPLETION_FIELDS, "completions")
    for name, neutral in (("echo", False), ("best_of", 1), ("suffix", None)):
        if body.get(name, neutral) not in (neutral, None):
            raise unsupported(name, "the gateway returns one sampled continuation of the prompt")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise bad("'prompt' must be one non-empty string", "prompt")
    call.prompt = prompt
    top = integer(body, "logprobs", 0, 5)
    call.logprobs, call.top_logprobs = top is not None, top or 0
    return call


# ---------------------------------------------------------------------------------------------- responses
def openai_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name,
                                                          "arguments": json.dumps(c.arguments)}}
            for c in calls]


def _token(t: TokenInfo) -> dict[str, Any]:
    return {"token": t.text, "logprob": t.logprob, "bytes": list(t.text.encode())}


def chat_logprobs(tokens: list[TokenInfo]) -> dict[str, Any]:
    """OpenAI's `logprobs` of a choice: each token with its top alternatives."""
    return {"content": [{**_token(t), "top_logprobs": [_token(TokenInfo(a, lp)) for a, lp in t.top]}
                        for t in tokens], "refusal": None}


def chat_response(call: Call, t: Turn) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": t.content if not t.calls else t.content or None}
    if t.calls:
        msg["tool_calls"] = openai_calls(t.calls)
    return {"id": t.id, "object": "chat.completion", "created": _now(), "model": t.model,
            "choices": [{"index": 0, "message": msg, "finish_reason": t.finish,
                         "logprobs": chat_logprobs(t.tokens) if call.logprobs else None}],
            "usage": t.usage}


def chat_chunks(call: Call, head: Head, items: Iterator[Any]) -> Iterator[Event]:
    """The streamed form of a chat turn: the role, the content as it is generated (with its log-probs), each
    tool call, the finish reason (and the usage)."""
    def chunk(delta: dict[str, Any], finish: str | None = None, tokens: list[TokenInfo] | None = None
              ) -> Event:
        c: dict[str, Any] = {"id": head.id, "object": "chat.completion.chunk", "created": head.created,
                             "model": head.model,
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                          "logprobs": chat_logprobs(tokens) if tokens else None}]}
        if call.include_usage:
            c["usage"] = None
        return None, c

    yield chunk({"role": "assistant", "content": ""})
    sent = 0
    for item in items:
        if isinstance(item, Piece):
            sent += len(item.text)
            yield chunk({"content": item.text}, tokens=item.tokens if call.logprobs else None)
        elif isinstance(item, ApiError):
            yield None, openai_error(item)
        else:
            if item.content[sent:]:
                yield chunk({"content": item.content[sent:]})
            for i, tc in enumerate(openai_calls(item.calls)):
                yield chunk({"tool_calls": [{"index": i, **tc}]})
            yield chunk({}, item.finish)
            if call.include_usage:
                yield None, {"id": head.id, "object": "chat.completion.chunk", "created": head.created,
                             "model": head.model, "choices": [], "usage": item.usage}


def completion_response(call: Call, t: Turn) -> dict[str, Any]:
    return {"id": t.id, "object": "text_completion", "created": _now(), "model": t.model,
            "choices": [{"index": 0, "text": t.content, "finish_reason": t.finish,
                         "logprobs": _completion_logprobs(t.tokens) if call.logprobs else None}],
            "usage": t.usage}


def _completion_logprobs(tokens: list[TokenInfo]) -> dict[str, Any]:
    return {"tokens": [t.text for t in tokens], "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [dict(t.top) for t in tokens], "text_offset": []}


def completion_chunks(call: Call, head: Head, items: Iterator[Any]) -> Iterator[Event]:
    def chunk(text: str, finish: str | None = None) -> Event:
        return None, {"id": head.id, "object": "text_completion", "created": head.created,
                      "model": head.model,
                      "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}

    sent = 0
    for item in items:
        if isinstance(item, Piece):
            sent += len(item.text)
            yield chunk(item.text)
        elif isinstance(item, ApiError):
            yield None, openai_error(item)
        else:
            yield chunk(item.content[sent:], item.finish)
            if call.include_usage:
                yield None, {"id": head.id, "object": "text_completion", "created": head.created,
                             "model": head.model, "choices": [], "usage": item.usage}


def models_response(name: str) -> dict[str, Any]:
    """The served model, in a list both SDKs read (OpenAI's fields and Anthropic's)."""
    return {"object": "list", "data": [{"id": name, "object": "model", "type": "model", "created": 0,
                                        "created_at": "1970-01-01T00:00:00Z", "display_name": name,
                                        "owned_by": "rlvr"}],
            "has_more": False, "first_id": name, "last_id": name}


def _now() -> int:
    import time

    return int(time.time())


CHAT = Api("chat", chat_request, chat_response, chat_chunks, openai_error, "chatcmpl-", "call_",
           done_marker=True)
COMPLETIONS = Api("completions", completion_request, completion_response, completion_chunks, openai_error,
                  "cmpl-", "call_", done_marker=True)
