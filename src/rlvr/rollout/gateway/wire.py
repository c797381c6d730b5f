"""The OpenAI wire format of the gateway: requests checked and turned into rlvr records, responses shaped
back.

Everything here is pure (no policy, no sockets): `chat_request` and `completion_request` validate a decoded
JSON body and raise `ApiError` (rendered as OpenAI's `{"error": {...}}`) naming the parameter at fault;
`chat_response`, `chat_chunks` and their completion counterparts build what the OpenAI SDK expects back.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.parse import CALL_RE, CLOSE, FORMAT_HINT, OPEN

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
         "function": "tool"}
"""OpenAI roles -> rlvr roles (`developer` is the newer name of `system`)."""


class ApiError(Exception):
    """A request the gateway refuses, in OpenAI's error format."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass
class Request:
    """One checked chat or completion request."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    """The chat history as sent (OpenAI dicts, contents flattened to text)."""
    prompt: str | None = None
    """For /v1/completions: the raw prompt text."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    model: str = ""


def _number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise bad(f"'{name}' must be a number from {lo:g} to {hi:g}, got {v!r}", name)
    return float(v)


def _integer(body: dict[str, Any], name: str, lo: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise bad(f"'{name}' must be an integer of at least {lo}, got {v!r}", name)
    return v


def _common(body: Any) -> Request:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad(f"'model' must be a string, got {model!r}", "model")
    n = body.get("n", 1)
    if n != 1:
        raise bad(f"'n' must be 1 here (each choice would be its own sample of the episode), got {n!r}", "n")
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise bad(f"'stop' must be a string or a list of up to 4 non-empty strings, got {stop!r}", "stop")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad(f"'stream' must be a boolean, got {stream!r}", "stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    max_tokens = _integer(body, "max_completion_tokens", 1)
    max_tokens = max_tokens if max_tokens is not None else _integer(body, "max_tokens", 1)
    return Request(model=model, max_tokens=max_tokens, temperature=_number(body, "temperature", 0, 2),
                   top_p=_number(body, "top_p", 0, 1), stop=stops, seed=_integer(body, "seed", -(1 << 63)),
                   stream=stream, include_usage=bool(opts.get("include_usage")))


def _text(content: Any, where: str) -> str:
    """A message content as text: a string, or a list of text parts (other parts are refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad(f"{where}.content[{i}] is a {kind!r} part; this policy reads text parts only",
                          f"{where}.content")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise bad(f"{where}.content must be a string or a list of text parts", f"{where}.content")


def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise bad("'tools' must be a list", "tools")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                      f"\"parameters\": {{...}}}}}}", f"tools[{i}]")
    return tools


def _tool_choice(body: dict[str, Any], tools: list[dict[str, Any]]) -> Any:
    choice = body.get("tool_choice", "auto") or "auto"
    names = {t["function"]["name"] for t in tools}
    if choice in ("auto", "none", "required"):
        if choice == "required" and not tools:
            raise bad("'tool_choice' is 'required' but no 'tools' are given", "tool_choice")
        return choice
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if name not in names:
            raise bad(f"'tool_choice' names the function {name!r}, which is not in 'tools'", "tool_choice")
        return {"type": "function", "function": {"name": name}}
    raise bad(f"'tool_choice' must be auto, none, required or {{\"type\": \"function\", \"function\": "
              f"{{\"name\": ...}}}}, got {choice!r}", "tool_choice")


def chat_request(body: Any) -> Request:
    """A checked /v1/chat/completions request."""
    req = _common(body)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list of messages", "messages")
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            got = m.get("role") if isinstance(m, dict) else m
            raise bad(f"{where}.role must be one of {', '.join(ROLES)}, got {got!r}", f"{where}.role")
        calls = m.get("tool_calls") or []
        if not isinstance(calls,
                          list) or any(not isinstance(c, dict) or not isinstance(c.get("function"), dict)
                                              for c in calls):
            raise bad(f"{where}.tool_calls must be a list of {{\"id\", \"type\": \"function\", \"function\": "
                      f"{{\"name\", \"arguments\"}}}}", f"{where}.tool_calls")
        req.messages.append({"role": ROLES[m["role"]], "content": _text(m.get("content"), where),
                             "tool_calls": calls, "tool_call_id": m.get("tool_call_id"),
                             "name": m.get("name")})
    req.tools = _tools(body)
    req.tool_choice = _tool_choice(body, req.tools)
    return req


def completion_request(body: Any) -> Request:
    """A checked /v1/completions request (one prompt string)."""
    req = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise bad("'prompt' must be one non-empty string", "prompt")
    req.prompt = prompt
    return req


# ------------------------------------------------------------------------------------------- tools as text
def tools_text(tools: Sequence[dict[str, Any]], choice: Any) -> str:
    """The tools described in rlvr's text format, for a chat template that does not render tool schemas."""
    lines = [f"Act by calling tools as {FORMAT_HINT}. Tools:"]
    for t in tools:
        fn = t["function"]
        params = json.dumps(fn.get("parameters") or {}, separators=(",", ":"), sort_keys=True)
        lines.append(f"- {fn['name']}: {fn.get('description') or ''} parameters {params}".rstrip())
    if choice == "required":
        lines.append("Call at least one tool now.")
    elif isinstance(choice, dict):
        lines.append(f"Call the tool {choice['function']['name']} now.")
    return "\n".join(lines)


def call_text(calls: Sequence[ToolCall]) -> str:
    """Calls written in rlvr's text format (how an assistant message the gateway did not write is
    rendered)."""
    return "".join(OPEN + json.dumps({"name": c.name, "arguments": c.arguments}) + CLOSE for c in calls)


def visible_content(text: str) -> str:
    """What the caller sees as `content` of a turn whose calls go out as `tool_calls`: the text without
    them."""
    return CALL_RE.sub("", text).strip()


def openai_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in calls]


def to_message(d: dict[str, Any], raw: str | None) -> Message:
    """One checked request message as an rlvr Message; an assistant turn the gateway wrote is its raw text."""
    if d["role"] == "tool":
        return Message(role="tool", content=d["content"], tool_call_id=d.get("tool_call_id") or "",
                       name=d.get("name"))
    if d["role"] == "assistant":
        if raw is not None:
            return Message(role="assistant", content=raw)
        calls = [ToolCall(id=str(c.get("id") or ""), name=str(c["function"].get("name") or ""),
                          arguments=_args(c["function"].get("arguments"))) for c in d["tool_calls"]]
        return Message(role="assistant", content=d["content"] + call_text(calls))
    return Message(role=d["role"], content=d["content"])


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        v = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError:
        return {"_raw": raw}
    return v if isinstance(v, dict) else {"_value": v}


# ---------------------------------------------------------------------------------------------- responses
@dataclass
class Reply:
    """What one call produced, ready to be shaped as a response."""

    id: str
    model: str
    text: str
    """The raw generated text."""
    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


def chat_response(t: Reply) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": t.content}
    if t.tool_calls:
        msg["tool_calls"] = t.tool_calls
    return {"id": t.id, "object": "chat.completion", "created": t.created, "model": t.model,
            "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": t.finish_reason}],
            "usage": t.usage}


def chat_chunks(t: Reply, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The streamed form of a chat turn: role, content, each tool call, the finish reason (and the usage)."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {"id": t.id, "object": "chat.completion.chunk", "created": t.created,
                             "model": t.model,
                             "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                          "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return c

    yield chunk({"role": "assistant", "content": ""})
    if t.content:
        yield chunk({"content": t.content})
    for i, call in enumerate(t.tool_calls):
        yield chunk({"tool_calls": [{"index": i, **call}]})
    yield chunk({}, t.finish_reason)
    if include_usage:
        yield {"id": t.id, "object": "chat.completion.chunk", "created": t.created, "model": t.model,
               "choices": [],
               "usage": t.usage}


def completion_response(t: Reply) -> dict[str, Any]:
    return {"id": t.id, "object": "text_completion", "created": t.created, "model": t.model,
            "choices": [{"index": 0, "text": t.text, "logprobs": None, "finish_reason": t.finish_reason}],
            "usage": t.usage}


def completion_chunks(t: Reply, include_usage: bool) -> Iterator[dict[str, Any]]:
    yield {"id": t.id, "object": "text_completion", "created": t.created, "model": t.model,
           "choices": [{"index": 0, "text": t.text, "logprobs": None, "finish_reason": t.finish_reason}]}
    if include_usage:
        yield {"id": t.id, "object": "text_completion", "created": t.created, "model": t.model, "choices": [],
               "usage": t.usage}


def models_response(name: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "rlvr"}]}
