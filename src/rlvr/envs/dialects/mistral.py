"""Mistral's `[TOOL_CALLS]`: the JSON list of the v3 tokenizer (Mistral 7B v0.3, Nemo) and the
`name[ARGS]{...}` form of v11 and later (Mistral Small 3.1 / 3.2, Devstral, Magistral), with
`[THINK]...[/THINK]` reasoning.

rlvr's own parser: `renderers` has no Mistral renderer, and vLLM's (which has one) cannot be a dependency of
the core. Mistral's templates want what the others do not: a call id of exactly nine letters and digits on
every call and its tool result, the calls as `tool_calls` (their alternation check skips only such turns), and
no user message right after a turn with calls.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from rlvr.envs.dialects.base import Dialect, Parsed, arguments_of, openai_calls, split_reasoning
from rlvr.envs.messages import Message, ToolCall

TOOL_CALLS = "[TOOL_CALLS]"
THINK = ("[THINK]", "[/THINK]")
_ID = re.compile(r"[A-Za-z0-9]{9}")
_V11 = re.compile(r"\s*([^\[\]{}\s]+)\s*(?:\[CALL_ID\]\s*([A-Za-z0-9]+)\s*)?\[ARGS\]")


def mistral_id(seed: str) -> str:
    """A call id Mistral's templates accept (nine letters and digits), the same for the same call."""
    return hashlib.sha1(seed.encode()).hexdigest()[:9]


def _listed(text: str) -> list[tuple[str | None, str | None, Any]]:
    """The calls of a v3 JSON list, object by object, so that one cut off at the end leaves those before
    it."""
    out: list[tuple[str | None, str | None, Any]] = []
    decoder, pos = json.JSONDecoder(), 1
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            item, pos = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            out.append((None, None, f"is not valid JSON ({why})"))
            break
        ok = isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]
        out.append((item["name"], item.get("id"), item.get("arguments", {})) if ok else
                   (None, None, "needs a string 'name'"))
    return out


class Mistral(Dialect):
    name = "mistral"
    models = "Mistral Small 3.1 / 3.2, Devstral, Magistral, Ministral 3 (v11+ tokenizers)"
    markers: tuple[str, ...] = (TOOL_CALLS, "[ARGS]", "[CALL_ID]", *THINK)
    signature: tuple[str, ...] = (TOOL_CALLS, "[ARGS]")
    user_after_calls = False
    think = THINK
    history = ("the template renders a turn with calls from its `tool_calls` (re-serialised, with their "
               "ids), writes the tool list before the last user message and the system prompt with it "
               "(Nemo): the record starts a new segment when the model's own text differs or a user message "
               "arrives")

    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None, *,
              id_prefix: str = "call") -> Parsed:
        reasoning, rest = split_reasoning(text, THINK)  # Magistral
        content, _, tail = rest.partition(TOOL_CALLS)
        if not _:
            return Parsed(content=rest.strip(), reasoning=reasoning)
        calls: list[ToolCall] = []
        errors: list[str] = []
        for n, (name, cid, raw) in enumerate(self._attempts(tail)):
            try:
                if name is None:
                    raise ValueError(raw)
                args = arguments_of(raw)
            except ValueError as exc:
                errors.append(self.call_error(n + 1, str(exc) if name is None else f"has {exc}"))
                continue
            seed = f"{id_prefix}|{n}|{name}|{json.dumps(args, sort_keys=True)}"
            calls.append(ToolCall(id=cid if cid and _ID.fullmatch(cid) else mistral_id(seed), name=name,
                                  arguments=args))
        return Parsed(calls, errors, content.strip(), reasoning)

    @staticmethod
    def _attempts(tail: str) -> list[tuple[str | None, str | None, Any]]:
        """(name, id, arguments) per call after `[TOOL_CALLS]`; (None, None, why) for one that cannot be
        read."""
        out: list[tuple[str | None, str | None, Any]] = []
        for chunk in tail.split(TOOL_CALLS):
            if chunk.lstrip().startswith("["):  # v3: one JSON list of calls
                out.extend(_listed(chunk.strip()))
                continue
            m = _V11.match(chunk)
            if m is None:
                out.append((None, None, "is not NAME[ARGS]{...}"))
                continue
            out.append((m.group(1), m.group(2), chunk[m.end():].strip()))
        return out

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        cid = call.id if _ID.fullmatch(call.id or "") else mistral_id(f"{index}|{call.name}")
        return f"{TOOL_CALLS}{call.name}[CALL_ID]{cid}[ARGS]{json.dumps(call.arguments, ensure_ascii=False)}"

    @property
    def hint(self) -> str:
        return f'{TOOL_CALLS}TOOL[ARGS]{{"ARG": "VALUE"}}'

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """The calls alone when there are any (the template renders no text beside them)."""
        return "".join(self.format_call(c, i) for i, c in enumerate(calls)) if calls else content

    def message_dict(self, message: Message) -> dict[str, Any]:
        parsed = self.parse(message.content)
        if not parsed.calls:
            return {"role": "assistant", "content": message.content}
        return self.structured(parsed.content, parsed.calls)

    def structured(self, content: str, calls: Sequence[ToolCall],
                   reasoning: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            fixed = [c if _ID.fullmatch(c.id or "") else
                     c.model_copy(update={"id": mistral_id(f"{i}|{c.name}")}) for i, c in enumerate(calls)]
            out["tool_calls"] = openai_calls(fixed)
        return out


class MistralV3(Mistral):
    name = "mistral_v3"
    models = "Mistral 7B v0.3, Mistral Nemo (v3 tokenizers: a JSON list after [TOOL_CALLS])"
    markers = (TOOL_CALLS,)
    signature = (TOOL_CALLS,)
    hint = Dialect.hint  # the list form, not v11's

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        return f"{TOOL_CALLS}[{', '.join(self.format_call(c) for c in calls)}]" if calls else content
