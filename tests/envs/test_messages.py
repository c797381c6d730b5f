"""Conversation records as the chat-template / OpenAI dicts a backend sends."""
from __future__ import annotations

from rlvr.envs.messages import Message, ToolCall, message_dicts


def test_message_dicts() -> None:
    conv = [Message(role="system", content="s"),
            Message(role="assistant", content="a",
                    tool_calls=[ToolCall(id="c1", name="run", arguments={"cmd": "ls"})]),
            Message(role="tool", content="out", tool_call_id="c1", name="run", exec_status="ok"),
            Message(role="tool", content="x")]
    assert message_dicts(conv) == [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": "out", "tool_call_id": "c1", "name": "run"},
        {"role": "tool", "content": "x", "tool_call_id": ""},
    ]
