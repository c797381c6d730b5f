"""The gateway reads a model's calls with the model's own tool dialect, through every API it serves: the one
reader `convert.reader_of` picks from the policy's dialect, the same the Env reads that model's turns with.

The model is a family's published chat template around a small BPE tokenizer, writing its turn as its
template writes one (`FamilyModel`, tests/rollout/core/test_dialect_records.py): reasoning, then two calls.
Each API must hand the caller exactly the calls the dialect reads in what was sampled, and a streamed turn
must never show the caller a call's text as content."""
from __future__ import annotations

import json
from typing import Any

import pytest

from rlvr.envs.dialects import HERMES
from rlvr.envs.messages import Message
from rlvr.envs.tools import tools_for
from rlvr.rollout.gateway.convert import READER, reader_of
from rlvr.rollout.gateway.core import Gateway
from rlvr.rollout.policy import SamplingParams
from tests.rollout.core.test_dialect_records import FamilyModel, _task

ASK = "Fix add in sol.py."


def _tools() -> list[dict[str, Any]]:
    return [t.spec() for t in tools_for(_task()).values()]


def _body(api: str, stream: bool) -> dict[str, Any]:
    tools = _tools()
    if api == "chat":
        return {"model": "m", "messages": [{"role": "user", "content": ASK}], "tools": tools,
                "stream": stream}
    if api == "messages":
        return {"model": "m", "max_tokens": 4096, "messages": [{"role": "user", "content": ASK}],
                "stream": stream, "tools": [{"name": t["function"]["name"], "input_schema":
                                             t["function"]["parameters"]} for t in tools]}
    return {"model": "m", "input": ASK, "stream": stream,
            "tools": [{"type": "function", "name": t["function"]["name"],
                       "parameters": t["function"]["parameters"]} for t in tools]}


class StreamingModel(FamilyModel):
    """A FamilyModel that hands each sampled token to the gateway as it is sampled, as the backends do."""

    def generate(self, conversations: Any, params: SamplingParams, *, prompt_token_ids: Any = None) -> Any:
        out = super().generate(conversations, params, prompt_token_ids=prompt_token_ids)
        for row, comp in enumerate(out):
            for token, logprob in zip(comp.token_ids, comp.logprobs):
                if params.on_token is not None:
                    params.on_token(row, token, logprob, None)
        return out


PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def _calls(api: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, arguments) of each call in a non-streamed reply."""
    if api == "chat":
        return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in body["choices"][0]["message"].get("tool_calls") or []]
    if api == "messages":
        return [(b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use"]
    return [(o["name"], json.loads(o["arguments"])) for o in body["output"] if o["type"] == "function_call"]


def _content(api: str, body: dict[str, Any]) -> str:
    """The visible text of a non-streamed reply."""
    if api == "chat":
        return body["choices"][0]["message"].get("content") or ""
    if api == "messages":
        return "".join(b["text"] for b in body["content"] if b["type"] == "text")
    return "".join(c["text"] for o in body["output"] if o["type"] == "message" for c in o["content"]
                   if c["type"] == "output_text")


def _streamed(api: str, events: list[tuple[str | None, dict[str, Any]]]
              ) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(the text streamed as content, the calls) of a streamed reply."""
    if api == "chat":
        deltas = [e["choices"][0]["delta"] for _, e in events if e.get("choices")]
        calls = [tc["function"] for d in deltas for tc in d.get("tool_calls") or []]
        return ("".join(d.get("content") or "" for d in deltas),
                [(c["name"], json.loads(c["arguments"])) for c in calls])
    if api == "messages":
        text = "".join(e["delta"].get("text", "") for k, e in events if k == "content_block_delta")
        names = [e["content_block"]["name"] for k, e in events
                 if k == "content_block_start" and e["content_block"]["type"] == "tool_use"]
        args: dict[int, str] = {}
        for k, e in events:
            if k == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
                args[e["index"]] = args.get(e["index"], "") + e["delta"]["partial_json"]
        return text, [(n, json.loads(a or "{}")) for n, a in zip(names, args.values())]
    text = "".join(e["delta"] for k, e in events if k == "response.output_text.delta")
    done = next(e["response"] for k, e in events if k == "response.completed")
    return text, _calls(api, done)


@pytest.mark.parametrize("family", ["qwen3-coder", "kimi-k2", "mistral-small-3.2", "gpt-oss", "deepseek-v3"])
def test_every_api_reads_a_familys_calls_with_its_dialect(family: str) -> None:
    model = StreamingModel(family)
    assert model.dialect is not HERMES and reader_of(model) is not READER
    gw = Gateway(model, SamplingParams(temperature=0.0, max_new_tokens=4096))
    try:
        for api in PATHS:
            content = ""
            for stream in (False, True):
                session = gw.open_session(f"{api}-{stream}")  # a fresh episode: the same first turn
                model.given = [Message(role="user", content=ASK)]
                r = gw.handle("POST", PATHS[api], {"authorization": f"Bearer {session.key}"},
                              _body(api, stream))
                assert r.status == 200, r.body
                sampled = model.dialect.parse(model.decode_turn(model.sampled[-1]), _tools())
                assert sampled.calls, f"{family}: the scripted turn has no call the dialect reads"
                if stream:  # what was streamed is the reply's content, which holds no call
                    assert r.events is not None
                    text, calls = _streamed(api, list(r.events))
                    assert text == content, (api, text, content)
                else:
                    assert r.body is not None
                    calls, content = _calls(api, r.body), _content(api, r.body)
                    assert sampled.content in content and "sol.py\"" not in content, (api, content)
                    assert all(f"{c.name}" not in content for c in sampled.calls), (api, content)
                assert calls == [(c.name, c.arguments) for c in sampled.calls], (api, stream)
    finally:
        gw.close()


@pytest.mark.parametrize("family", ["qwen2.5", "kimi-k2", "gpt-oss", "llama-3.1", "mistral-nemo"])
def test_a_forced_call_is_framed_in_the_familys_form(family: str) -> None:
    """The grammar of a forced call writes it as the family does: the dialect reads it back."""
    from rlvr.envs.messages import ToolCall
    from rlvr.rollout.gateway.convert import SENTINEL_KEY, SENTINEL_NAME

    model = FamilyModel(family)
    reader = reader_of(model)
    frame = reader.frame
    assert frame is not None
    before, between, after = frame
    text = before + "read_file" + between + json.dumps({"path": "sol.py"}) + after
    parsed = model.dialect.parse(text, _tools())
    assert [(c.name, c.arguments) for c in parsed.calls] == [("read_file", {"path": "sol.py"})]
    assert SENTINEL_NAME not in text and SENTINEL_KEY not in text
    # a turn the gateway did not write is written back as the family writes it, and read back the same
    calls = [ToolCall(id="a", name="list_files", arguments={}), ToolCall(id="b", name="read_file",
                                                                        arguments={"path": "sol.py"})]
    back = model.dialect.parse(reader.turn(calls, "Looking."), _tools())
    assert [(c.name, c.arguments) for c in back.calls] == [(c.name, c.arguments) for c in calls]
