"""Every request field honoured or refused: response_format and tool_choice by constrained decoding on the
tiny hf model (the turn matches, its log-probs are the masked distribution's, the call's record says it was
constrained), logprobs and top_logprobs returned as recorded, temperature and seed honoured and recorded,
unknown fields refused with a 400 naming them."""
from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
import torch

from rlvr.rollout.episode import Episode
from rlvr.rollout.gateway.core import Gateway

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
COUNT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
         "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": name, "parameters": COUNT}} for name in ("inc", "dec")]


@pytest.fixture()
def gateway(served, tiny):
    return served(tiny, temperature=1.0, max_new_tokens=80)


def client(gw: Gateway, session) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=session.key, max_retries=0)


def masked_logprobs_hold(tiny, session) -> None:
    """Each generated token's recorded log-prob is at least the unmasked one (the mask renormalises over the
    allowed tokens), and above it somewhere: it is the constrained distribution's, as sampled."""
    rec = session.record()[-1]
    with torch.no_grad():
        logits = tiny.model(torch.tensor([rec.token_ids])).logits[0, :-1].float()
    free = torch.log_softmax(logits, -1).gather(-1, torch.tensor(rec.token_ids[1:])[:, None]).squeeze(-1)
    gen = [i for i, m in enumerate(rec.loss_mask) if m]
    assert all(rec.logprobs[i] >= free[i - 1].item() - 1e-4 for i in gen)
    assert any(rec.logprobs[i] > free[i - 1].item() + 1e-3 for i in gen)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_response_format_json_schema_constrains_the_turn(gateway, tiny, seed):
    session = gateway.open_session("ep")
    r = client(gateway, session).chat.completions.create(
        model="p", messages=[{"role": "user", "content": "Who are you?"}], seed=seed, max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "who", "schema": SCHEMA}})
    if r.choices[0].finish_reason == "stop":  # a random model may run out of tokens inside the object
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    masked_logprobs_hold(tiny, session)
    ep = session.fill(Episode(task_id="t", domain="d"))
    assert ep.metadata["calls"][0]["constrained"] is True


def test_json_object_and_a_forced_tool_call(gateway, tiny):
    session = gateway.open_session("ep")
    c = client(gateway, session)
    r = c.chat.completions.create(model="p", messages=[{"role": "user", "content": "Count."}], max_tokens=60,
                                  seed=4, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "length" or isinstance(json.loads(r.choices[0].message.content),
                                                                dict)
    for seed, choice in ((5, "required"), (6, {"type": "function", "function": {"name": "dec"}})):
        r = c.chat.completions.create(model="p", messages=[{"role": "user", "content": "Count."}],
                                      seed=seed, tools=TOOLS, tool_choice=choice, max_tokens=80,
                                      parallel_tool_calls=False)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and len(msg.tool_calls) == 1, r
        assert msg.tool_calls[0].function.name in ({"inc", "dec"} if choice == "required" else {"dec"})
        assert isinstance(json.loads(msg.tool_calls[0].function.arguments)["n"], int)
    ep = session.fill(Episode(task_id="t", domain="d"))
    assert ep.metadata["tool_calls"] == 2 and len(ep.metadata["tool_names"]) == 2


def test_logprobs_and_top_logprobs_are_what_was_recorded(gateway, tiny):
    session = gateway.open_session("ep")
    r = client(gateway, session).chat.completions.create(
        model="p", messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=3, max_tokens=12,
        temperature=0.7)
    got = r.choices[0].logprobs.content
    rec = session.record()[0]
    sampled = [(t, lp) for t, lp, m in zip(rec.token_ids, rec.logprobs, rec.loss_mask) if m]
    sampled = [(t, lp) for t, lp in sampled if t not in tiny.eos_ids]
    assert [g.logprob for g in got] == pytest.approx([lp for _, lp in sampled])
    assert [g.token for g in got] == [tiny.decode([t]) for t, _ in sampled]
    for g in got:
        tops = [t.logprob for t in g.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and g.logprob <= tops[0] + 1e-6
    ep = session.fill(Episode(task_id="t", domain="d"))
    assert ep.metadata["calls"][0]["temperature"] == 0.7 and ep.metadata["calls"][0]["run_sampling"] is False


def test_temperature_zero_and_seed_are_honoured(gateway, tiny):
    c = client(gateway, gateway.open_session("a"))
    msgs = [{"role": "user", "content": "hi"}]
    greedy = [c.chat.completions.create(model="p", messages=msgs, temperature=0, max_tokens=8, seed=s)
              .choices[0].message.content for s in (1, 2)]
    assert greedy[0] == greedy[1]
    # the seed of an episode's first call: two episodes asking the same seed sample the same turn
    same = [client(gateway, gateway.open_session(s)).chat.completions.create(
        model="p", messages=msgs, max_tokens=8, seed=9).choices[0].message.content for s in "bc"]
    other = client(gateway, gateway.open_session("d")).chat.completions.create(
        model="p", messages=msgs, max_tokens=8, seed=10).choices[0].message.content
    assert same[0] == same[1] != other


@pytest.mark.parametrize("path, body, param", [
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "frobnicate": 1}, "frobnicate"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "presence_penalty": 0.5},
     "presence_penalty"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 10}},
     "logit_bias"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}], "response_format": {
        "type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}}, "response_format"),
    ("/completions", {"prompt": "x", "echo": True}, "echo"),
    ("/responses", {"input": "x", "text": {"format": {"type": "xml"}}}, "text.format"),
])
def test_fields_not_served_are_refused_by_name(gateway, path, body, param):
    r = httpx.post(gateway.base_url + path, json={"model": "p", **body},
                   headers={"Authorization": f"Bearer {gateway.open_session('e').key}"})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.json()
