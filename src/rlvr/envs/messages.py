"""Conversation records: the chat messages and tool calls that pass between a model and its Env.

They live here, in `envs`, because the Env is their lowest user: it parses tool calls from the model's text,
answers them with tool messages and trims the transcript to the context budget. Everything above (the rollout
backends and engine, the Episode record, the store, the trainer) imports them from here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field


class ToolCall(BaseModel):
    """A tool call parsed from the model's output."""

    id: str = ""
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    """One chat message of the transcript (system, user, assistant or tool)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Calls the assistant made in this message."""
    tool_call_id: str | None = None
    """For a tool message: the call it answers."""
    name: str | None = None
    """For a tool message: the tool's name."""
    exec_status: str | None = None
    """For a tool message that ran in the sandbox: the ExecResult status."""
    elided: bool = False
    """True when this message's content was shortened to fit the context budget."""


class AssistantForm(Protocol):
    """How a model family's chat template takes an earlier assistant turn (a tool dialect,
    rlvr.envs.dialects)."""

    def message_dict(self, message: Message) -> dict[str, Any]:
        ...


def message_dicts(conversation: Sequence[Message], form: AssistantForm | None = None) -> list[dict[str, Any]]:
    """Messages as chat-template / OpenAI dicts; `form` gives the assistant turns as the model family's
    template takes them (the text as written, or its calls as `tool_calls`)."""
    out: list[dict[str, Any]] = []
    for m in conversation:
        if form is not None and m.role == "assistant":
            out.append(form.message_dict(m))
            continue
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.role == "tool":
            d["tool_call_id"] = m.tool_call_id or ""
            if m.name:
                d["name"] = m.name
        out.append(d)
    return out
