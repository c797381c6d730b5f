"""Anthropic Messages and OpenAI Responses through the gateway, driven by the official `anthropic` and
`openai` SDKs (streaming too): tool loops recorded as one segment exactly as sampled, the model's own calls
recorded, keys from x-api-key, budgets and bad fields refused in each API's own error format, tokens streamed
as they are sampled."""
from __future__ import annotations

import json
import threading

import anthropic
import httpx
import openai
import pytest

from rlvr.rollout.episode import Episode
from rlvr.rollout.gateway.core import Gateway
from rlvr.rollout.gateway.server import serve
from rlvr.rollout.policy import SamplingParams
from tests.scripted_hf import ScriptedHF

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
ADD = {"name": "add", "description": "Add two integers.",
       "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}


@pytest.fixture(scope="module")
def scripted(tiny_dir):
    return ScriptedHF(tiny_dir, ["Let me add. " + CALL, "The sum is 5."])


@pytest.fixture()
def gateway(served, scripted):
    return served(scripted, temperature=1.0, max_new_tokens=128)


def generated(scripted, session) -> list[int]:
    rec = session.record()
    assert len(rec) == 1, "the tool loop extends one record"
    return [t for t, m in zip(rec[0].token_ids, rec[0].loss_mask) if m]


def expected(scripted) -> list[int]:
    eos = min(scripted.eos_ids)
    return scripted.encode("Let me add. " + CALL) + [eos] + scripted.encode("The sum is 5.") + [eos]


# ------------------------------------------------------------------------------------------ Messages
def anthropic_loop(client: anthropic.Anthropic, stream: bool) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "What is 2 + 3?"}]
    for _ in range(3):
        kw = dict(model="policy", max_tokens=100, system="You add numbers.", tools=[ADD], messages=messages)
        if stream:
            with client.messages.stream(**kw) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**kw)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if reply.stop_reason != "tool_use":
            return messages
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": str(u.input["a"] + u.input["b"])}
            for u in uses]})
    return messages


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_sdk_tool_loop_is_recorded_as_sampled(gateway, scripted, stream):
    session = gateway.open_session("ep", seed=1)
    client = anthropic.Anthropic(base_url=gateway.base_url[:-3], api_key=session.key, max_retries=0)
    messages = anthropic_loop(client, stream)
    first = messages[1]["content"]
    assert first[0] == {"type": "text", "text": "Let me add."}
    assert first[1]["type"] == "tool_use" and first[1]["name"] == "add" and first[1]["input"] == {"a": 2,
                                                                                                  "b": 3}
    assert messages[-1]["content"] == [{"type": "text", "text": "The sum is 5."}]
    assert generated(scripted, session) == expected(scripted)
    ep = session.fill(Episode(task_id="t", domain="d"))
    assert ep.metadata["tool_names"] == ["add"] and ep.metadata["tool_calls"] == 1
    assert [c["api"] for c in ep.metadata["calls"]] == ["messages", "messages"]
    tool_msg = next(m for m in ep.messages if m.role == "tool")
    assert tool_msg.name == "add" and tool_msg.content == "5", "a tool result is named after the model's call"


def test_anthropic_streams_events_in_anthropics_order(gateway):
    session = gateway.open_session("ep")
    client = anthropic.Anthropic(base_url=gateway.base_url[:-3], api_key=session.key, max_retries=0)
    events = list(client.messages.create(model="p", max_tokens=100, tools=[ADD], stream=True,
                                         messages=[{"role": "user", "content": "2 + 3?"}]))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:4] == ["content_block_start", "content_block_delta",
                          "content_block_delta"], "text token by token"
    blocks = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert blocks == ["text", "tool_use"]
    assert events[-2].delta.stop_reason == "tool_use" and events[-2].usage.output_tokens > 0
    text = "".join(e.delta.text for e in events
                   if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert text == "Let me add."


def test_anthropic_keys_errors_and_budgets_are_in_anthropics_format(gateway):
    bad = anthropic.Anthropic(base_url=gateway.base_url[:-3], api_key="sk-guess", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        bad.messages.create(model="p", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "authentication_error"
    session = gateway.open_session("ep", max_turns=1)
    bearer = anthropic.Anthropic(base_url=gateway.base_url[:-3], auth_token=session.key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:  # ANTHROPIC_AUTH_TOKEN is read as well
        bearer.messages.create(model="p", max_tokens=5, extra_body={"top_k": 3}, messages=[{"role": "user",
                                                                                            "content": "hi"}])
    assert err.value.body["error"] == {"type": "invalid_request_error",
                                       "message": err.value.body["error"]["message"]}
    assert "top_k" in err.value.body["error"]["message"]
    client = anthropic.Anthropic(base_url=gateway.base_url[:-3], api_key=session.key, max_retries=0)
    client.messages.create(model="p", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="p", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert "turn budget" in err.value.body["error"]["message"] and session.truncated_by == "turns"
    for body in ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
                 {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305",
                                                                            "name": "web_search"}]},
                 {"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled",
                                                                              "budget_tokens": 1024}},
                 {"messages": [{"role": "user", "content": "x"}], "logprobs": True}):
        r = httpx.post(gateway.base_url + "/messages", json={"model": "p", "max_tokens": 5, **body},
                       headers={"x-api-key": gateway.open_session("e").key})
        assert r.status_code == 400 and r.json()["type"] == "error", body
        assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(gateway.base_url + "/messages/count_tokens",
                   headers={"x-api-key": gateway.open_session("e").key},
                   json={"model": "p", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0


def test_stop_sequences_are_cut_and_reported(gateway):
    session = gateway.open_session("ep")
    client = anthropic.Anthropic(base_url=gateway.base_url[:-3], api_key=session.key, max_retries=0)
    r = client.messages.create(model="p", max_tokens=100, stop_sequences=["add"],
                               messages=[{"role": "user", "content": "2 + 3?"}])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == "add"
    assert r.content[0].text == "Let me ", "the stop sequence is not in the content"


# ----------------------------------------------------------------------------------------- Responses
def responses_loop(client: openai.OpenAI, stream: bool) -> list[dict]:
    tools = [{"type": "function", "name": "add", "description": "Add.", "parameters": ADD["input_schema"]}]
    items: list[dict] = [{"role": "user", "content": "What is 2 + 3?"}]
    for _ in range(3):
        kw = dict(model="policy", instructions="You add numbers.", input=items, tools=tools, store=False)
        if stream:
            events = list(client.responses.create(stream=True, **kw))
            assert events[0].type == "response.created" and events[-1].type == "response.completed"
            reply = events[-1].response
        else:
            reply = client.responses.create(**kw)
        out = [o.model_dump(exclude_none=True) for o in reply.output]
        items += out
        calls = [o for o in out if o["type"] == "function_call"]
        if not calls:
            return items
        items += [{"type": "function_call_output", "call_id": c["call_id"],
                   "output": str(sum(json.loads(c["arguments"]).values()))} for c in calls]
    return items


@pytest.mark.parametrize("stream", [False, True])
def test_an_openai_responses_tool_loop_is_recorded_as_sampled(gateway, scripted, stream):
    session = gateway.open_session("ep")
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    items = responses_loop(client, stream)
    message, call = items[1], items[2]
    assert message["type"] == "message" and message["content"][0]["text"] == "Let me add."
    assert call["type"] == "function_call" and call["name"] == "add"
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3}
    assert items[-1]["content"][0]["text"] == "The sum is 5."
    assert generated(scripted, session) == expected(scripted)
    ep = session.fill(Episode(task_id="t", domain="d"))
    assert ep.metadata["tool_names"] == ["add"]


def test_responses_errors_are_in_openais_format(gateway):
    session = gateway.open_session("ep")
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    for kw, param in (({"previous_response_id": "resp_1"}, "previous_response_id"),
                      ({"tools": [{"type": "web_search"}]}, "tools[0]"),
                      ({"reasoning": {"effort": "high"}}, "reasoning"),
                      ({"extra_body": {"frobnicate": 1}}, "frobnicate")):
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model="p", input="hi", **kw)
        assert err.value.body["param"] == param and err.value.body["type"] == "invalid_request_error"


# ---------------------------------------------------------------------------------------- streaming
@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_tokens_are_streamed_as_they_are_sampled(tiny_dir, api):
    """Generation pauses after its first token until the client has read it: a gateway that sent the turn
    only at its end would never let the first token through, and the policy would wait in vain."""
    policy = ScriptedHF(tiny_dir, ["Hello there, streaming world."])
    gw = Gateway(policy, SamplingParams(max_new_tokens=64))
    policy.gate = threading.Event()
    with serve(gw) as server:
        key = gw.open_session("ep").key
        texts = []
        if api == "chat":
            client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
            for chunk in client.chat.completions.create(model="p", messages=[{"role": "user",
                                                                              "content": "hi"}],
                                                        stream=True):
                texts += [c.delta.content for c in chunk.choices if c.delta.content]
                policy.gate.set() if texts else None
        elif api == "messages":
            client = anthropic.Anthropic(base_url=server.base_url[:-3], api_key=key, max_retries=0)
            with client.messages.stream(model="p", max_tokens=64, messages=[{"role": "user",
                                                                             "content": "hi"}]) as s:
                for text in s.text_stream:
                    texts.append(text)
                    policy.gate.set()
        else:
            client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
            for ev in client.responses.create(model="p", input="hi", stream=True):
                if ev.type == "response.output_text.delta":
                    texts.append(ev.delta)
                    policy.gate.set()
    gw.close()
    assert policy.gate_waited is True, "the first token reached the client while generation was still going"
    assert "".join(texts) == "Hello there, streaming world." and len(texts) > 10, texts


def test_tool_calls_are_the_models_whatever_form_results_come_back_in(gateway, scripted):
    """smolagents sends observations back as user messages: the episode still counts the model's calls, by
    name, and the monitor does not see an agent that stopped using its tools."""
    from rlvr.monitor.metrics import agent_metrics
    from rlvr.rollout.episode import mask_calls, tool_names
    from rlvr.store.schema import episode_to_row

    session = gateway.open_session("ep")
    c = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    tools = [{"type": "function", "function": {"name": "add", "parameters": ADD["input_schema"]}}]
    msgs: list[dict] = [{"role": "user", "content": "What is 2 + 3?"}]
    for _ in range(2):
        msg = c.chat.completions.create(model="p", messages=msgs, tools=tools).choices[0].message
        msgs.append({"role": "assistant",
                     "content": msg.content or ""})  # the call as text, the way it logs it
        msgs.append({"role": "user", "content": "Observation: 5"})
    ep = session.fill(Episode(task_id="t", domain="d", status="done", metadata={"multi_turn": True}))
    assert not any(m.role == "tool" for m in ep.messages)
    assert tool_names(ep) == ["add"] and episode_to_row(ep)["num_tool_calls"] == 1
    assert episode_to_row(ep)["tool_names"] == ["add"]
    assert agent_metrics([ep])["agent/no_tool_call_share"] == 0.0
    # the record marks each call, so a run can keep chosen ones out of training
    masked = mask_calls(ep, lambda call: bool(call["tool_calls"]))
    first = ep.metadata["calls"][0]
    assert first["tool_calls"] == ["add"] and first["end"] > first["start"]
    span = range(first["start"], first["end"])

    def mask_of(e: Episode) -> list[int]:
        segs = e.metadata["segments"]
        return segs[first["segment"]]["loss_mask"] if first["segment"] < len(segs) else e.loss_mask

    assert all(mask_of(ep)[i] == 1 for i in span) and all(mask_of(masked)[i] == 0 for i in span)
    assert ep.metadata["calls"][1]["tool_calls"] == [] and sum(masked.loss_mask) == sum(ep.loss_mask) > 0
