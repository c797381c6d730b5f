"""Tool-call parsing: the text format and OpenAI tool_calls; malformed calls become messages, never
crashes."""
from __future__ import annotations

import json

import pytest

from rlvr.envs.messages import ToolCall
from rlvr.envs.parse import format_call, parse_openai, parse_text


def test_several_calls_in_one_message() -> None:
    text = ('I will look first. <tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>\n'
            '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>')
    calls, errors = parse_text(text)
    assert errors == []
    assert [(c.name, c.arguments) for c in calls] == [("read_file", {"path": "a.py"}), ("run_tests", {})]
    assert len({c.id for c in calls}) == 2


def test_arguments_may_be_a_json_string() -> None:
    calls, errors = parse_text('<tool_call>{"name": "run", "arguments": "{\\"command\\": '
                               '\\"ls\\"}"}</tool_call>')
    assert errors == [] and calls[0].arguments == {"command": "ls"}


@pytest.mark.parametrize("body, message", [
    ('{"name": "run", "arguments": {', "not valid JSON"),
    ('["run"]', "must be a JSON object"),
    ('{"arguments": {}}', "string 'name'"),
    ('{"name": 3}', "string 'name'"),
    ('{"name": "run", "arguments": [1, 2]}', "arguments must be a JSON object"),
    ('{"name": "run", "arguments": "not json"}', "arguments are not valid JSON"),
])
def test_malformed_calls_are_reported(body: str, message: str) -> None:
    calls, errors = parse_text(f"<tool_call>{body}</tool_call>")
    assert calls == [] and len(errors) == 1 and message in errors[0]


def test_unclosed_tag_and_good_call_together() -> None:
    calls, errors = parse_text('<tool_call>{"name": "submit"}</tool_call> <tool_call>{"name": "run"')
    assert [c.name for c in calls] == ["submit"]
    assert errors and "never closed" in errors[0]


def test_plain_text_has_no_calls() -> None:
    assert parse_text("the answer is 4") == ([], [])


def test_deeply_nested_json_does_not_crash() -> None:
    calls, errors = parse_text("<tool_call>" + "[" * 100_000 + "]" * 100_000 + "</tool_call>")
    assert calls == [] and len(errors) == 1


def test_openai_tool_calls() -> None:
    raw = [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "x"}'}},
           {"id": "c2", "type": "function", "function": {"name": "run", "arguments": "{oops"}},
           {"id": "c3", "type": "function"}]
    calls, errors = parse_openai(raw)
    assert [(c.id, c.name, c.arguments) for c in calls] == [("c1", "read_file", {"path": "x"})]
    assert len(errors) == 2


def test_format_round_trips() -> None:
    call = ToolCall(name="write_file", arguments={"path": "a.py", "content": "x = '<tool_call>'\n"})
    calls, errors = parse_text(format_call(call))
    assert errors == [] and calls[0].arguments == call.arguments
    assert json.loads(format_call(call)[len("<tool_call>"):-len("</tool_call>")])["name"] == "write_file"
