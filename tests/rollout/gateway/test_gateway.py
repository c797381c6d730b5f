"""The gateway: the real openai SDK as the agent's client, token records equal to what was sampled and sent,
segments, keys, budgets, the OpenAI error format, and one GRPO step on gateway episodes."""
from __future__ import annotations

import json

import openai
import pytest
import torch

from rlvr.rollout.episode import Episode, split_segments
from rlvr.rollout.gateway.core import Gateway
from rlvr.rollout.gateway.server import serve
from rlvr.rollout.policies.hf import HFPolicy
from rlvr.rollout.policy import Completion, SamplingParams

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "integer"}, "b": {"type": "integer"}}}}}]


class ScriptedHF(HFPolicy):
    """The tiny model, made to write a tool call and then a final answer: the text is scripted, its tokens
    and their log-probs are the model's own (computed under the exact prompt), so the record is trainable."""

    def generate(self, conversations, params, *, prompt_token_ids=None):
        out = []
        for i, prompt in enumerate(prompt_token_ids):
            seen = self.tokenizer.decode(prompt)
            text = ("The sum is 5." if '"content": "5"' in seen or "5" in seen.rsplit("<|tool|>", 1)[-1]
                    else '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
            ids = (self.encode(text) + [min(self.eos_ids)])[:params.budget(i)]
            reason = "stop" if ids[-1] in self.eos_ids else "length"
            with torch.no_grad():
                logits = self.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
            lps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()
            out.append(Completion(text=self.decode(ids), token_ids=ids, logprobs=lps,
                                  prompt_token_ids=list(prompt),
                                  finish_reason=reason))
        return out


@pytest.fixture(scope="module")
def scripted(tiny_dir):
    return ScriptedHF(tiny_dir, device="cpu", threads=1)


@pytest.fixture()
def gateway(scripted):
    gw = Gateway(scripted, SamplingParams(temperature=1.0, max_new_tokens=128))
    with serve(gw) as server:
        gw.base_url = server.base_url
        yield gw
    gw.close()


def agent_loop(client: openai.OpenAI, prompt: str, *, stream: bool = False) -> list[dict]:
    """A small tool-using agent, as a team would write it with the OpenAI SDK."""
    messages: list[dict] = [{"role": "user", "content": prompt}]
    for _ in range(4):
        if stream:
            chunks = list(client.chat.completions.create(model="policy", messages=messages, tools=TOOLS,
                                                         stream=True))
            calls = [tc for ch in chunks for c in ch.choices for tc in (c.delta.tool_calls or [])]
            content = "".join(c.delta.content or "" for ch in chunks for c in ch.choices) or None
            msg = {"role": "assistant", "content": content}
            if calls:
                msg["tool_calls"] = [{"id": tc.id, "type": "function", "function": {
                    "name": tc.function.name, "arguments": tc.function.arguments}} for tc in calls]
        else:
            r = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
            msg = r.choices[0].message.model_dump(exclude_none=True)
        messages.append(msg)
        if not msg.get("tool_calls"):
            return messages
        for call in msg["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": str(args["a"] + args["b"])})
    return messages


@pytest.mark.parametrize("stream", [False, True])
def test_tool_loop_through_the_openai_sdk_is_recorded_as_one_segment(gateway, scripted, stream):
    session = gateway.open_session("ep", seed=3)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    messages = agent_loop(client, "What is 2 + 3?", stream=stream)
    assert messages[1]["tool_calls"][0]["function"]["name"] == "add"
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 3}
    assert messages[-1]["content"] == "The sum is 5."
    segs = session.record()
    assert len(segs) == 1 and session.calls == 2
    rec = segs[0]
    assert len(rec.token_ids) == len(rec.loss_mask) == len(rec.logprobs)
    # what the model generated is exactly the trained part, in order, and decodes to what the agent received
    gen = [t for t, m in zip(rec.token_ids, rec.loss_mask) if m]
    eos = min(scripted.eos_ids)
    turns = [scripted.encode(t) + [eos] for t in
             ('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>', "The sum is 5.")]
    assert gen == turns[0] + turns[1]
    # the recorded log-probs are the model's under the recorded context (what a trainer recomputes)
    with torch.no_grad():
        logits = scripted.model(torch.tensor([rec.token_ids])).logits[0, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(rec.token_ids[1:])[:, None]).squeeze(-1)
    for i, m in enumerate(rec.loss_mask):
        if m:
            assert abs(lp[i - 1].item() - rec.logprobs[i]) < 1e-4


def test_each_prompt_is_the_record_so_far(gateway, scripted):
    """A call that extends the history continues the record: its prompt is the previous prompt + completion
    + the new messages' template text, token for token (never re-tokenized)."""
    session = gateway.open_session("ep")
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    seen: list[list[int]] = []
    real = scripted.generate
    scripted.generate = lambda convs, params, prompt_token_ids=None: (seen.extend(prompt_token_ids), real(
        convs, params, prompt_token_ids=prompt_token_ids))[1]
    try:
        agent_loop(client, "What is 2 + 3?")
    finally:
        del scripted.generate
    rec = session.record()[0]
    assert rec.token_ids[:len(seen[0])] == seen[0] and rec.token_ids[:len(seen[1])] == seen[1]
    assert len(seen[1]) > len(seen[0])


def test_an_edited_history_starts_a_new_segment_trained_on_its_own_tokens(gateway):
    session = gateway.open_session("ep")
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    agent_loop(client, "What is 2 + 3?")
    # the agent summarises its history: the next prompt is not an extension of the last one
    client.chat.completions.create(model="p",
                                   messages=[{"role": "user", "content": "Summary: 2 + 3 = 5. Say it."}],
                                   tools=TOOLS)
    segs = session.record()
    assert len(segs) == 2
    assert segs[1].token_ids[:len(segs[0].token_ids)] != segs[0].token_ids
    ep = session.fill(Episode(task_id="t", domain="d"))
    assert ep.token_ids == segs[1].token_ids and len(ep.metadata["segments"]) == 1
    parts = split_segments([ep])
    assert [p.token_ids for p in parts] == [segs[0].token_ids, segs[1].token_ids]
    assert {p.episode_id for p in parts} == {ep.episode_id}


def test_unknown_and_revoked_keys_are_refused_in_the_openai_format(gateway):
    bad = openai.OpenAI(base_url=gateway.base_url, api_key="sk-guess", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        bad.models.list()
    assert err.value.body["code"] == "invalid_api_key"
    session = gateway.open_session("ep")
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    assert [m.id for m in client.models.list().data] == [gateway.model_name]
    gateway.close_session(session.key)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools[0]"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
])
def test_malformed_requests_get_a_clear_openai_error(gateway, body, param):
    import httpx

    session = gateway.open_session("ep")
    r = httpx.post(gateway.base_url + "/chat/completions", json={"model": "p", **body},
                   headers={"Authorization": f"Bearer {session.key}"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]
    r = httpx.post(gateway.base_url + "/chat/completions", content=b"{not json",
                   headers={"Authorization": f"Bearer {session.key}"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.get(gateway.base_url + "/nowhere", headers={"Authorization": f"Bearer {session.key}"})
    assert r.status_code == 404 and "error" in r.json()


def test_turn_and_token_budgets_stop_the_episode(gateway):
    session = gateway.open_session("ep", max_turns=1)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        agent_loop(client, "What is 2 + 3?")
    assert err.value.body["code"] == "budget_exhausted"
    assert session.truncated_by == "turns" and session.stopped.is_set() and session.calls == 1
    session = gateway.open_session("ep2", max_tokens=5)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    r = client.chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    assert session.truncated_by == "tokens"


def test_a_call_refused_for_context_is_named_in_the_eval_report(gateway, scripted):
    """An agent whose first prompt does not fit the window got 0 turns and 0 % with no reason printed: the
    refusal is recorded on the episode and the eval report counts it by its budget, with the message."""
    from rlvr.monitor.evals import report

    session = gateway.open_session("long")
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="p", messages=[
            {"role": "user", "content": "x" * (scripted.max_context + 10)}])
    assert err.value.body["code"] == "context_length_exceeded"
    ep = session.fill(Episode(task_id="t", domain="code", status="truncated",
                              truncated_by=session.truncated_by))
    refused = ep.metadata["refused"]
    assert f"maximum context length is {scripted.max_context} tokens" in refused and ep.num_turns == 0
    rep = report([ep], k=1, seed=0, policy="p", tasks="t")
    assert rep["end_reasons"] == {"truncated by context": {"episodes": 1, "refused": refused}}


def test_completions_endpoint_records_the_raw_prompt(tiny):
    gw = Gateway(tiny, SamplingParams(max_new_tokens=6))
    with serve(gw) as server:
        session = gw.open_session("ep", seed=1)
        client = openai.OpenAI(base_url=server.base_url, api_key=session.key, max_retries=0)
        r = client.completions.create(model="p", prompt="def add(a, b):", max_tokens=4)
        rec = session.record()[0]
        assert rec.token_ids[:len(tiny.encode("def add(a, b):"))] == tiny.encode("def add(a, b):")
        assert sum(rec.loss_mask) == r.usage.completion_tokens <= 4
        assert tiny.decode([t for t, m in zip(rec.token_ids, rec.loss_mask) if m]) == r.choices[0].text
    gw.close()


def test_one_grpo_step_on_gateway_episodes(tiny_dir):
    """Episodes recorded through the gateway train like any others: groups, advantages, one update."""
    from rlvr.config import TrainConfig
    from rlvr.rollout.core.groups import groups
    from rlvr.train.advantages import ADVANTAGES
    from rlvr.train.update import PolicyUpdater, samples_from

    tiny = HFPolicy(tiny_dir, device="cpu", threads=1)  # its own copy: the update changes the weights
    gw = Gateway(tiny, SamplingParams(temperature=1.0, max_new_tokens=8))
    episodes = []
    with serve(gw) as server:
        for i in range(4):
            session = gw.open_session(f"ep{i}", seed=i)
            client = openai.OpenAI(base_url=server.base_url, api_key=session.key, max_retries=0)
            client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Say hi."}])
            ep = session.fill(Episode(task_id="t", domain="d", group_id="g", sample_index=i, status="done"))
            ep.reward = float(i % 2)
            episodes.append(ep)
    gw.close()
    advantages = {}
    for group in groups(episodes).values():
        advantages.update(zip([e.episode_id for e in group], ADVANTAGES["grpo"]([e.reward for e in group])))
    samples = samples_from(split_segments(episodes), advantages)
    assert len(samples) == 4
    before = [p.detach().clone() for p in tiny.model.parameters()]
    updater = PolicyUpdater(tiny.model, TrainConfig(lr=1e-3), pad_id=tiny.pad_id, temperature=1.0)
    stats = updater.step(samples)
    assert stats is not None
    assert any(not torch.equal(a, b) for a, b in zip(before, tiny.model.parameters()))
