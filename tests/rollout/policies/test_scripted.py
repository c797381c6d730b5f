"""The scripted backend: turn replay by prompt match, native calls, budget cuts, and bad script files."""
from __future__ import annotations

import json

import pytest

from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.rollout.policies.scripted import ScriptedPolicy
from rlvr.rollout.policy import SamplingParams


def conv(prompt: str, assistant_turns: int = 0) -> list[Message]:
    ms = [Message(role="user", content=prompt)]
    for _ in range(assistant_turns):
        ms += [Message(role="assistant", content="x"), Message(role="tool", content="y")]
    return ms


def write(tmp_path, data) -> str:
    p = tmp_path / "script.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def test_replays_turns_by_match_and_index(tmp_path) -> None:
    pol = ScriptedPolicy.from_file(write(tmp_path, {
        "default": ["d0", "d1"],
        "match": [{"prompt_contains": "add",
                   "turns": ["a0", {"content": "", "tool_calls": [{"name": "submit"}]}]}]}))
    p = SamplingParams()
    out = pol.generate([conv("write add"), conv("write add", 1), conv("other"), conv("other", 1),
                        conv("other", 2)], p)
    assert [c.text for c in out] == ["a0", "", "d0", "d1", ""]
    assert out[1].tool_calls[0].name == "submit"
    assert out[0].token_ids == list(b"a0") and out[0].logprobs == [0.0, 0.0]


def test_a_plain_list_is_the_default(tmp_path) -> None:
    pol = ScriptedPolicy.from_file(write(tmp_path, ["only"]))
    assert pol.generate([conv("anything")], SamplingParams())[0].text == "only"


def test_budget_cut(tmp_path) -> None:
    pol = ScriptedPolicy.from_file(write(tmp_path, ["héllo world"]))
    c = pol.generate([conv("x")], SamplingParams(max_new_tokens=2))[0]
    assert c.finish_reason == "length" and c.token_ids == list("héllo".encode())[:2] and c.text == "h"


@pytest.mark.parametrize("content, message", [
    ('{"default": ["a",', "invalid JSON"),
    ('{"defualt": []}', "defualt"),
    ('{"match": [{"turns": []}]}', "match.0.prompt_contains"),
    ('{"default": [3]}', "default.0"),
])
def test_bad_scripts_are_user_errors(tmp_path, content, message) -> None:
    path = write(tmp_path, content)
    with pytest.raises(UserError, match=message) as exc:
        ScriptedPolicy.from_file(path)
    assert path in str(exc.value) and "\n" not in str(exc.value)


def test_missing_and_binary_files(tmp_path) -> None:
    with pytest.raises(UserError, match="no such script file"):
        ScriptedPolicy.from_file(tmp_path / "nope.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UserError, match="UTF-8"):
        ScriptedPolicy.from_file(tmp_path / "bin.json")
