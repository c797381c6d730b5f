"""Tool dialects against each family's published chat template: placing the template, and render -> parse
round trips of a conversation with several calls, a reasoning block and a malformed call."""
from __future__ import annotations

from typing import Any

import pytest

from rlvr.envs.dialects import DIALECTS, HERMES, detect, get, of_episode, resolve
from rlvr.envs.messages import Message, ToolCall
from rlvr.errors import UserError
from tests.families import FAMILIES, family_tokenizer, template, turn_text

TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n}.", "parameters": {
    "type": "object", "properties": {k: {"type": "string"} for k in keys}, "required": list(keys)}}}
    for n, keys in (("run", ("command",)), ("write_file", ("path", "content")), ("read_file", ("path",)))]
CODE = 'def f(x):\n    return "<b>" if x else \'&\'\n'
"""A file with quotes, markup and a final newline: every form must hand it to the tool unchanged."""

KEEPS: dict[str, tuple[bool, bool]] = {
    "qwen2.5": (True, False), "qwen3": (True, True), "qwen3-coder": (True, False), "qwen3.5": (True, True),
    "llama-3.1": (False, False), "mistral-small-3.2": (False, False), "mistral-nemo": (False, False),
    "deepseek-v3": (True, False), "gpt-oss": (False, True), "glm-4.5": (True, True), "kimi-k2": (True, False),
    "gemma-4": (True, True),
}
"""(content, reasoning): what the family's template renders of an assistant turn with calls, past the last
user message. The rest it drops (Llama and Mistral render the calls alone, gpt-oss turns the text into
analysis)."""
RAW = {"deepseek-v3"}
"""Families whose template gets an earlier turn as the text the model wrote (its `message_dict`), not as
`tool_calls`: DeepSeek V3's renders a second turn with calls without its markers (its `is_first` is never
reset)."""


def _turns(dialect_name: str) -> list[list[ToolCall]]:
    """The calls of the conversation's two tool turns (one call a turn where the family makes one)."""
    calls = [ToolCall(id="call_0", name="run", arguments={"command": "ls -la"}),
             ToolCall(id="call_1", name="write_file", arguments={"path": "sol.py", "content": CODE})]
    return [calls[:1], calls[1:]] if DIALECTS[dialect_name].single_call else [calls, calls[:1]]


def _conversation(family: str, malformed: str) -> list[dict[str, Any]]:
    d = DIALECTS[FAMILIES[family]["dialect"]]
    out: list[dict[str, Any]] = [{"role": "user", "content": "Fix sol.py, then submit."}]
    for i, calls in enumerate(_turns(d.name)):
        content, reasoning = ("Looking.", "I should look first.") if i == 0 else ("Writing.", None)
        if family in RAW:
            think = f"<think>\n{reasoning}\n</think>\n\n" if reasoning else ""
            asst = d.message_dict(Message(role="assistant", content=think + d.format_turn(calls, content)))
        else:
            asst = d.structured(content, calls, reasoning)
        out.append(asst)
        for c in asst.get("tool_calls") or [{"id": c.id, "function": {"name": c.name}} for c in calls]:
            out.append({"role": "tool", "content": "ok", "tool_call_id": c["id"],
                        "name": c["function"]["name"]})
    out.append(d.message_dict(Message(role="assistant", content=malformed)))
    return out


def _rendered_turns(family: str, conv: list[dict[str, Any]]) -> list[str]:
    """Each assistant turn as the model would have written it after the generation prompt."""
    tok = family_tokenizer(family)

    def render(msgs: list[dict[str, Any]], gen: bool) -> str:
        return tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=gen)

    out = []
    for k, m in enumerate(conv):
        if m["role"] != "assistant":
            continue
        base, full = render(conv[:k], False), render(conv[:k + 1], False)
        assert full.startswith(base), f"{family}: adding a turn rewrote the history before it"
        markers = DIALECTS[FAMILIES[family]["dialect"]].markers
        out.append(turn_text(tok, family, markers, render(conv[:k], True), full))
    return out


def _malformed(dialect_name: str) -> str:
    """A turn with one good call and one cut off inside its arguments (the model ran out of tokens)."""
    d = DIALECTS[dialect_name]
    text = d.format_turn([ToolCall(id="call_0", name="run", arguments={"command": "pwd"}),
                          ToolCall(id="call_1", name="read_file", arguments={"path": "CUT_HERE"})])
    return text[:text.index("CUT_HERE")]


ROUND_TRIP = [f for f in FAMILIES if f in KEEPS]


@pytest.mark.parametrize("family", ROUND_TRIP)
def test_render_parse_round_trip(family: str) -> None:
    name = FAMILIES[family]["dialect"]
    d = DIALECTS[name]
    conv = _conversation(family, _malformed(name))
    turns = _rendered_turns(family, conv)
    keeps_content, keeps_reasoning = KEEPS[family]
    for i, calls in enumerate(_turns(name)):
        parsed = d.parse(turns[i], TOOLS)
        assert parsed.errors == [], (family, turns[i])
        assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls], \
            turns[i]
        assert len({c.id for c in parsed.calls}) == len(calls)
        text = "Looking." if i == 0 else "Writing."
        assert parsed.content == (text if keeps_content else ""), (family, parsed)
        if i == 0 and keeps_reasoning:
            assert parsed.reasoning is not None and "I should look first." in parsed.reasoning
    bad = d.parse(_malformed(name), TOOLS)
    assert len(bad.errors) == 1 and bad.errors[0].endswith(d.hint), bad
    assert [(c.name, c.arguments) for c in bad.calls] == [("run", {"command": "pwd"})]


@pytest.mark.parametrize("name", list(DIALECTS))
def test_every_dialect_reads_what_it_writes(name: str) -> None:
    d = DIALECTS[name]
    calls = [ToolCall(name="write_file", arguments={"path": "a b/ü.py", "content": CODE}),
             ToolCall(name="run", arguments={"command": 'echo "{x}" | grep -c \'[a-z]\''}),
             ToolCall(name="submit", arguments={})]
    parsed = d.parse(d.format_turn(calls, "Done thinking."), TOOLS)
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("name", list(DIALECTS))
def test_plain_text_is_content_and_no_call(name: str) -> None:
    parsed = DIALECTS[name].parse("The answer is 4.")
    assert parsed.calls == [] and parsed.errors == [] and parsed.content.endswith("The answer is 4.")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_template_is_placed(family: str) -> None:
    assert resolve("auto", template(family)).name == FAMILIES[family]["dialect"]
    assert detect(template(family)) is DIALECTS[FAMILIES[family]["dialect"]]


def test_templates_without_tools_keep_rlvrs_format() -> None:
    from rlvr.rollout.policies.builtin import CHAT_TEMPLATE

    assert resolve("auto", CHAT_TEMPLATE) is HERMES
    assert resolve("auto", None) is HERMES
    assert resolve("auto", "{% for m in messages %}{{ m['content'] }}{% endfor %}") is HERMES


def test_a_template_with_tools_in_an_unknown_form_names_the_setting() -> None:
    from tests.families import ASSETS

    v31 = (ASSETS / "deepseek-v3.1.jinja").read_text(encoding="utf-8")  # V3.1 writes NAME<｜tool▁sep｜>ARGS
    with pytest.raises(UserError, match=r"policy.tool_format.*one of .*deepseek_v3") as err:
        resolve("auto", v31, model="m")
    assert "\n" not in str(err.value)
    assert resolve("deepseek_v3", v31).name == "deepseek_v3"  # naming one places it


def test_unknown_names_are_refused_with_the_nearest() -> None:
    with pytest.raises(UserError, match="did you mean 'qwen3_coder'"):
        get("qwen3coder")
    with pytest.raises(UserError, match="policy.tool_format"):
        resolve("harmony", None)


def test_stored_episodes_name_their_dialect() -> None:
    assert of_episode({"tool_format": "glm45"}) is DIALECTS["glm45"]
    assert of_episode({}) is HERMES


def test_reasoning_opened_by_the_generation_prompt() -> None:
    # Qwen3.5's prompt ends inside <think>: the turn starts with the reasoning and closes it
    text = ("Look first.\n</think>\n\n<tool_call>\n<function=run>\n<parameter=command>\nls\n</parameter>\n"
            "</function>\n</tool_call>")
    parsed = get("qwen3_coder").parse(text)
    assert parsed.reasoning == "Look first." and [c.name for c in parsed.calls] == ["run"]
    drafted = "<think>maybe <tool_call>{\"name\": \"submit\"}</tool_call></think>I will run it."
    parsed = HERMES.parse(drafted)  # a call drafted inside the reasoning is not run
    assert parsed.calls == [] and parsed.content == "I will run it."


def test_a_template_that_only_lists_the_tools_keeps_rlvrs_format() -> None:
    lists = ("{% if tools %}{% for t in tools %}{{ t['function']['name'] }};{% endfor %}{% endif %}"
             "{{ messages }}")
    assert resolve("auto", lists) is HERMES
