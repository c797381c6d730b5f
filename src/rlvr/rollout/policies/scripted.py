"""The `scripted` backend: replays assistant turns from a JSON file, for tests, demos and benchmarks.

File format (JSON)::

    {"default": [TURN, ...],
     "match": [{"prompt_contains": "fizzbuzz", "turns": [TURN, ...]}, ...]}

or simply a list of turns (the `default`). A conversation replays the turns of the first `match` entry whose
text occurs in its first user message, else `default`; its n-th assistant turn is TURN n (an empty turn once
the script runs out). A TURN is a string (the assistant's text, tool calls in the text format of
rlvr.envs.parse) or an object `{"content": str, "tool_calls": [{"name": str, "arguments": {...}}]}` for
native calls. Token ids are the UTF-8 bytes of the text and every log-prob is 0.0 (the script is certain).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlvr.envs.messages import Message, ToolCall
from rlvr.errors import UserError
from rlvr.rollout.policy import Completion, SamplingParams


class ScriptedTurn(BaseModel):
    """One scripted assistant turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str = ""
    """The assistant's text."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Native tool calls returned beside the text."""


class Match(BaseModel):
    """Turns for conversations whose task statement contains a string."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_contains: str = Field(min_length=1)
    """Text that must occur in the first user message."""
    turns: list[ScriptedTurn | str]
    """The turns to replay."""


class Script(BaseModel):
    """A whole script file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: list[ScriptedTurn | str] = Field(default_factory=list)
    """Turns for conversations no `match` entry claims."""
    match: list[Match] = Field(default_factory=list)
    """Entries tried in order."""


def _turn(t: ScriptedTurn | str) -> ScriptedTurn:
    return ScriptedTurn(content=t) if isinstance(t, str) else t


class ScriptedPolicy:
    """Replays a Script; deterministic, instant, and free of any model."""

    def __init__(self, script: Script, name: str = "scripted") -> None:
        self.script = script
        self.name = name
        self.version = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedPolicy:
        p = Path(path)
        if not p.is_file():
            raise UserError("no such script file", file=p, fix="give scripted:PATH to a JSON script")
        try:
            data: Any = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserError(f"invalid JSON: {exc.msg}", file=p, line=exc.lineno,
                            fix="fix the syntax") from None
        except UnicodeDecodeError:
            raise UserError("not a UTF-8 text file", file=p, fix="save the script as UTF-8 JSON") from None
        if isinstance(data, list):
            data = {"default": data}
        try:
            script = Script.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise UserError(err["msg"], file=p, field=loc or "(script)",
                            fix="see the format in rlvr.rollout.policies.scripted") from None
        return cls(script, name=str(p))

    def _turns(self, conversation: Sequence[Message]) -> list[ScriptedTurn | str]:
        prompt = next((m.content for m in conversation if m.role == "user"), "")
        for m in self.script.match:
            if m.prompt_contains in prompt:
                return m.turns
        return self.script.default

    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        out = []
        for i, conv in enumerate(conversations):
            turns = self._turns(conv)
            n = sum(m.role == "assistant" for m in conv)
            turn = _turn(turns[n]) if n < len(turns) else ScriptedTurn()
            ids = list(turn.content.encode("utf-8"))
            reason = "stop"
            if len(ids) > params.budget(i):  # a budget cut applies to scripts too
                ids = ids[: params.budget(i)]
                reason = "length"
            text = bytes(ids).decode("utf-8", errors="ignore")
            out.append(Completion(text=text, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=reason,
                                  tool_calls=list(turn.tool_calls) if reason == "stop" else []))
        return out
