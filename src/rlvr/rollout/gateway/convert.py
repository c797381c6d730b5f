"""What the three wire formats have in common, in rlvr's terms: a checked request (`Call`), what a call
produced (`Turn`), the one place a model's text becomes tool calls (`TurnReader`), and the stream of a turn's
visible text as it is generated (`TextStream`).

Each wire module (`wire` for OpenAI chat completions, `anthropic` for Messages, `responses` for Responses)
turns its body into a `Call` and a `Turn` back into its own response; the gateway's core sees only these.
Errors are `ApiError`s, which each wire module renders in its API's own error body.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.dialects import Dialect
from rlvr.envs.dialects.base import split_reasoning
from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.parse import CALL_RE, FORMAT_HINT, format_call, parse_text

SENTINEL_NAME, SENTINEL_KEY = "RLVR_NAME", "RLVR_KEY"
"""A call written with these shows where a tool's name and its arguments sit in the model's call form."""


class ApiError(Exception):
    """A request the gateway refuses; `status` is the HTTP status, `param` the request field at fault."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unsupported(param: str, why: str) -> ApiError:
    """A field the gateway does not serve: a 400 naming it, never a silent drop."""
    return ApiError(400, f"'{param}' is not supported by this gateway: {why}", param=param,
                    code="unsupported_parameter")


def refuse_unknown(body: dict[str, Any], known: set[str] | frozenset[str], api: str) -> None:
    """Refuse the first field of `body` the API module does not handle (honoured, or accepted as having no
    effect on sampling): every field is honoured or refused."""
    for name in body:
        if name not in known:
            raise unsupported(name, f"the gateway's {api} API does not know it (docs/INTEGRATIONS.md lists "
                                    "the fields it honours)")


# ------------------------------------------------------------------------------------------------ requests
@dataclass
class Call:
    """One checked request, whichever API it came through."""

    api: str
    """chat, completions, messages or responses."""
    messages: list[Message] = field(default_factory=list)
    """The history; assistant turns carry the calls they made in `tool_calls` (the core maps each back to the
    raw text the model wrote, when it wrote it)."""
    prompt: str | None = None
    """For /v1/completions: the raw prompt text."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Function tools as OpenAI chat specs: {"type": "function", "function": {name, description,
    parameters}}."""
    tool_choice: str | dict[str, str] = "auto"
    """auto, none, required, or {"name": NAME} (that tool, once)."""
    parallel_calls: bool = True
    """False: at most one call a turn."""
    response_format: dict[str, Any] | None = None
    """None (free text), {"type": "json_object"} or {"type": "json_schema", "schema": {...}}."""
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    model: str = ""


# ------------------------------------------------------------------------------------------------- results
@dataclass
class TokenInfo:
    """One generated token as the APIs report log-probs: its text, log-prob and top alternatives."""

    text: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class Turn:
    """What one call produced, ready to be shaped by a wire module."""

    id: str
    model: str
    text: str
    """The raw generated text (calls and all)."""
    content: str
    """The visible content sent to the caller (the calls taken out, cut at a stop string)."""
    calls: list[ToolCall]
    """The model's calls, with the API's ids."""
    finish: str
    """stop, length or tool_calls."""
    stop_sequence: str | None
    prompt_tokens: int
    completion_tokens: int
    tokens: list[TokenInfo] = field(default_factory=list)
    """Per generated token (end-of-turn tokens left out), when log-probs were asked for."""

    @property
    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


@dataclass
class Piece:
    """A streamed piece of a turn: new visible text and the tokens generated since the last piece."""

    text: str
    tokens: list[TokenInfo] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ reading turns
def read_calls(text: str, tools: Sequence[dict[str, Any]], id_prefix: str) -> tuple[list[ToolCall], str]:
    """The model's calls in its turn `text` and the visible content (the text without them): the one place
    the gateway reads tool calls out of a model's text."""
    calls, _ = parse_text(text, id_prefix=id_prefix)
    return calls, (CALL_RE.sub("", text).strip() if calls else text)


@dataclass(frozen=True)
class TurnReader:
    """How the served model writes tool calls: read out of a turn (`parse`), written back (`write`), and
    framed for a grammar (`frame`, `opener`)."""

    parse: Callable[[str, Sequence[dict[str, Any]], str], tuple[list[ToolCall], str]] = read_calls
    """(text, tools, id prefix) -> (calls, visible content)."""
    write: Callable[[ToolCall], str] = format_call
    """One call in the model's own form."""
    separator: str | None = ""
    """Between two calls of a turn; None when a turn's calls are not its one-call turns one after another
    (a grammar then frames one call a turn)."""
    hint: str = FORMAT_HINT
    """One call in the model's form, as the tools' description shows it."""
    whole: Callable[[Sequence[ToolCall], str], str] | None = None
    """(calls, content) -> the turn, for a form that wraps a turn's calls (Kimi's section, Mistral's list);
    None: the content, then the calls one after another."""
    opens: str | None = None
    """The text a call starts with (a form's opening marker); None: read from a written call."""

    def turn(self, calls: Sequence[ToolCall], content: str) -> str:
        """An assistant turn the gateway did not write, as the model would have written it."""
        if self.whole is not None:
            return self.whole(calls, content)
        return content + (self.separator or "").join(self.write(c) for c in calls)

    @property
    def frame(self) -> tuple[str, str, str] | None:
        """(text before the name, between the name and the arguments, after the arguments) of one call whose
        arguments are a JSON object written after its name; None for any other form (XML arguments, say),
        which cannot be constrained by a JSON-schema grammar."""
        text = self.turn([ToolCall(name=SENTINEL_NAME, arguments={SENTINEL_KEY: 0})], "")
        at_name, at_key = text.find(SENTINEL_NAME), text.find(f'"{SENTINEL_KEY}"')
        start = text.rfind("{", 0, at_key) if at_key >= 0 else -1
        end = text.find("}", at_key) + 1 if at_key >= 0 else 0
        if at_name < 0 or start < at_name + len(SENTINEL_NAME) or end <= 0:
            return None
        try:
            json.loads(text[start:end])
        except json.JSONDecodeError:
            return None
        return text[:at_name], text[at_name + len(SENTINEL_NAME):start], text[end:]

    @property
    def opener(self) -> str:
        """The text a call starts with: streamed text is held back from where it may begin."""
        if self.opens is not None:
            return self.opens
        text = self.turn([ToolCall(name=SENTINEL_NAME, arguments={})], "")
        head = (text[:text.find(SENTINEL_NAME)] if SENTINEL_NAME in text else text).lstrip()
        cut = next((i for i, ch in enumerate(head) if i and ch in '{"[ \n\t'), len(head))
        return head[:cut]  # the marker, not the JSON after it (a model may put blanks between)


READER = TurnReader()
"""rlvr's own format (`rlvr.envs.parse`)."""


def reader_of(policy: Any) -> TurnReader:
    """How `policy`'s model writes calls: the one place the gateway picks its reader. A policy that knows its
    model family's tool dialect (`policy.dialect`, placed from its chat template by `policy.tool_format`) is
    read with it, as the Env reads the same model's turns; any other writes rlvr's own format."""
    found = getattr(policy, "dialect", None)
    return dialect_reader(found) if isinstance(found, Dialect) else READER


def dialect_reader(dialect: Dialect) -> TurnReader:
    """A reader that parses and writes calls with `dialect`. The visible content is what a stream of the turn
    shows (`TextStream`, held back where a call may begin): a turn without calls keeps its text, as rlvr's own
    reader does, and a turn that reasons before its calls keeps its reasoning's text (the generation prompt
    may have opened the block, so a stream cannot tell it from content until it closes)."""
    one, other = ToolCall(name=SENTINEL_NAME, arguments={}), ToolCall(name="RLVR_OTHER", arguments={})
    first, second, both = (dialect.format_turn(c) for c in ([one], [other], [one, other]))
    # a turn's calls as one-call turns one after another (Qwen, gpt-oss, Llama), or one wrapped list (Kimi)
    joined = both.startswith(first) and both.endswith(second) and len(both) >= len(first) + len(second)
    # where a call may begin: the form's first marker after any reasoning block (GLM writes an empty one)
    body = split_reasoning(first, dialect.think)[1] if dialect.think else first
    head = min(((body.find(m), m) for m in dialect.markers if m in body), default=None)
    opens = head[1] if head is not None else None

    def parse(text: str, tools: Sequence[dict[str, Any]], id_prefix: str) -> tuple[list[ToolCall], str]:
        read = dialect.parse(text, tools, id_prefix=id_prefix)
        if not read.calls:
            return [], text
        at = text.find(opens) if opens and read.reasoning is not None else -1
        return read.calls, (text[:at].strip() if at > 0 else read.content)

    return TurnReader(parse=parse, write=dialect.format_call, hint=dialect.hint,
                      separator=both[len(first):len(both) - len(second)] if joined else None,
                      whole=lambda calls, content: dialect.format_turn(calls, content), opens=opens)


def tools_text(tools: Sequence[dict[str, Any]], choice: Any, hint: str) -> str:
    """The tools described in text, for a chat template that does not render tool schemas (`hint`: one call
    in the model's form)."""
    lines = [f"Act by calling tools as {hint}. Tools:"]
    for t in tools:
        fn = t["function"]
        params = json.dumps(fn.get("parameters") or {}, separators=(",", ":"), sort_keys=True)
        lines.append(f"- {fn['name']}: {fn.get('description') or ''} parameters {params}".rstrip())
    if choice == "required":
        lines.append("Call at least one tool now.")
    elif isinstance(choice, dict):
        lines.append(f"Call the tool {choice['name']} now.")
    return "\n".join(lines)


def with_system(msgs: list[Message], text: str) -> list[Message]:
    """`text` appended to the leading system message (or as one, first)."""
    if msgs and msgs[0].role == "system":
        return [msgs[0].model_copy(update={"content": msgs[0].content + "\n\n" + text}), *msgs[1:]]
    return [Message(role="system", content=text), *msgs]


def named(messages: list[Message]) -> list[Message]:
    """Tool results named after the calls they answer (the APIs send only the call's id)."""
    names = {c.id: c.name for m in messages if m.role == "assistant" for c in m.tool_calls}
    return [m.model_copy(update={"name": names[m.tool_call_id]})
            if m.role == "tool" and not m.name and m.tool_call_id in names else m for m in messages]


# ---------------------------------------------------------------------------------------------- streaming
class TextStream:
    """A turn's visible text as its tokens come: decoded incrementally, and held back from where a tool call
    may begin (when tools were offered), so that what is streamed is always a prefix of the turn's content."""

    def __init__(self, decode: Callable[[list[int]], str], opener: str | None, end_ids: frozenset[int], *,
                 stops: Sequence[str] = (), token_text: Callable[[int], str] | None = None) -> None:
        self.decode, self.opener, self.end_ids, self.token_text = decode, opener, end_ids, token_text
        self.stops = tuple(stops)
        self.ids: list[int] = []
        self.text = ""
        self.sent = ""
        self._prefix = self._read = 0
        self._tokens: list[TokenInfo] = []

    def push(self, token: int, logprob: float, top: dict[int, float] | None) -> Piece | None:
        """One generated token; the piece to send now, if any."""
        self.ids.append(token)
        if self.token_text is not None and token not in self.end_ids:
            self._tokens.append(info(self.token_text, token, logprob, top))
        before = self.decode(self.ids[self._prefix:self._read])
        now = self.decode(self.ids[self._prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):  # a whole character more
            self.text += now[len(before):]
            self._prefix, self._read = self._read, len(self.ids)
        visible = self.visible()
        if len(visible) <= len(self.sent) and not self._tokens:
            return None
        piece = Piece(visible[len(self.sent):], self._tokens)
        self.sent, self._tokens = visible if len(visible) > len(self.sent) else self.sent, []
        return piece

    def visible(self) -> str:
        """The part of the text so far that is sure to be in the turn's content: up to a stop string, and,
        when tools were offered, up to where a call may begin, blanks at both ends left out (such a turn's
        content is stripped). A partial stop string or opener at the end is held back until it is one."""
        text = self.text
        marks = [m for m in (self.opener, *self.stops) if m]
        full = [i for i in (text.find(m) for m in marks) if i >= 0]
        cut = min(full) if full else len(text)
        for m in marks:
            for k in range(min(len(m) - 1, cut), 0, -1):
                if text[:cut].endswith(m[:k]):
                    cut -= k
                    break
        text = text[:cut]
        return text.strip() if self.opener else text

    def rest(self, content: str) -> str:
        """What still has to be sent so that the caller holds `content` (when the stream so far is a prefix
        of it; otherwise what follows the longest common prefix, and the caller holds what it was sent)."""
        if content.startswith(self.sent):
            return content[len(self.sent):]
        common = next((i for i, (a, b) in enumerate(zip(content, self.sent)) if a != b), 0)
        return content[common:]

    def pending(self) -> list[TokenInfo]:
        """Tokens pushed since the last piece."""
        out, self._tokens = self._tokens, []
        return out


def info(token_text: Callable[[int], str], token: int, logprob: float, top: dict[int, float] | None
         ) -> TokenInfo:
    alts = sorted((top or {}).items(), key=lambda kv: -kv[1])
    return TokenInfo(token_text(token), logprob, [(token_text(t), lp) for t, lp in alts])


# ----------------------------------------------------------------------------------------------- the APIs
Event = tuple[str | None, dict[str, Any]]
"""One server-sent event: its name (None: a bare `data:` line) and its JSON data."""


@dataclass(frozen=True)
class Head:
    """What a streamed response opens with, before any token."""

    id: str
    model: str
    prompt_tokens: int
    created: int


@dataclass(frozen=True)
class Api:
    """One wire format: its request parser, response shapes and error body."""

    name: str
    parse: Callable[[Any], Call]
    reply: Callable[[Call, Turn], dict[str, Any]]
    stream: Callable[[Call, Head, Any], Any]
    """(call, head, items) -> events; `items` yields Pieces, then the Turn (or an ApiError if generation
    failed)."""
    error: Callable[[ApiError], dict[str, Any]]
    id_prefix: str
    """Of response ids (chatcmpl-, msg_, resp_)."""
    call_prefix: str
    """Of tool-call ids (call_, toolu_)."""
    done_marker: bool = False
    """True: the stream ends with `data: [DONE]` (OpenAI chat and completions)."""


def openai_error(exc: ApiError) -> dict[str, Any]:
    """OpenAI's error body (chat completions, completions, Responses)."""
    return {"error": {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}}
