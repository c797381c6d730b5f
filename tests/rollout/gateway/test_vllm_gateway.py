"""The gateway in front of the vllm backend (`make test-vllm`): the real openai SDK over loopback, plain and
streaming; the token record is what the engine sampled and the agent received, extended call after call, and
its log-probs are the trainer's under the recorded context."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

TOL = 2e-4
"""Largest |engine log-prob - trainer log-prob| accepted per token (float32 on CPU), as in test_vllm.py."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    # head size 32: the smallest the vLLM CPU attention kernels support
    return build_tiny_model(tmp_path_factory.mktemp("vgw"), n_layer=2, n_embd=64, n_head=2, n_positions=512,
                            seed=7)


@pytest.fixture(scope="module")
def gateway(model_dir):
    from rlvr.rollout.gateway.core import Gateway
    from rlvr.rollout.gateway.server import serve
    from rlvr.rollout.policies.backends import make_policy
    from rlvr.rollout.policy import SamplingParams

    policy = make_policy(f"vllm:{model_dir}")
    gw = Gateway(policy, SamplingParams(temperature=1.0, max_new_tokens=8))
    try:
        with serve(gw) as server:
            gw.base_url = server.base_url
            yield gw
    finally:
        gw.close()
        policy.close()


def test_the_gateway_serves_the_vllm_engine_and_records_what_it_sampled(gateway, model_dir) -> None:
    import openai
    from transformers import AutoModelForCausalLM

    from rlvr.train.update import token_logprobs

    session = gateway.open_session("ep", seed=5)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "What is 2 + 3?"}]
    received = 0
    prompts: list[int] = []
    for stream in (False, True):
        if stream:
            chunks = list(client.chat.completions.create(model="policy", messages=messages, stream=True,
                                                         stream_options={"include_usage": True}))
            content = "".join(c.delta.content or "" for ch in chunks for c in ch.choices)
            usage = next(ch.usage for ch in chunks if ch.usage is not None)
        else:
            r = client.chat.completions.create(model="policy", messages=messages, max_tokens=6)
            content, usage = r.choices[0].message.content or "", r.usage
        received += usage.completion_tokens
        prompts.append(usage.prompt_tokens)
        messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "go on"}]
    assert [m.id for m in client.models.list().data]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.base_url, api_key="sk-not-a-session", max_retries=0).models.list()

    segs = session.record()
    assert len(segs) == 1 and session.calls == 2, "the second call extends the first: one segment"
    rec = segs[0]
    assert len(rec.token_ids) == len(rec.loss_mask) == len(rec.logprobs)
    assert sum(rec.loss_mask) == received == session.generated > 0
    assert prompts[1] > prompts[0] and len(rec.token_ids) >= prompts[1]
    # the recorded log-probs (the engine's) are the trainer's under the recorded context
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        t = torch.tensor([rec.token_ids])
        lp = token_logprobs(model, t, torch.ones_like(t), 1.0)[0].tolist()
    worst = max(abs(lp[i] - rec.logprobs[i]) for i, m in enumerate(rec.loss_mask) if m)
    assert worst < TOL, worst
    gateway.close_session(session.key)


def test_vllm_streams_constrains_and_returns_top_logprobs(gateway, model_dir) -> None:
    """Tokens streamed from the engine as it steps; a JSON-schema turn under vLLM's guidance backend (the same
    llguidance grammar the hf backend masks with), its log-probs the masked distribution's; top
    alternatives."""
    import json

    import openai
    from transformers import AutoModelForCausalLM

    from rlvr.train.update import token_logprobs

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    session = gateway.open_session("ep", seed=2)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session.key, max_retries=0)
    chunks = list(client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "n?"}], stream=True, max_tokens=8,
        logprobs=True, top_logprobs=2))
    texts = [c.delta.content for ch in chunks for c in ch.choices if c.delta.content]
    assert len(texts) > 1, "streamed token by token"
    tops = [t for ch in chunks for c in ch.choices if c.logprobs for t in c.logprobs.content]
    assert tops and all(len(t.top_logprobs) == 2 for t in tops)
    r = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "n?"}],
                                       max_tokens=8, response_format={
                                           "type": "json_schema", "json_schema": {"name": "n",
                                                                                  "schema": schema}})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content)["n"], int)
    rec = session.record()[-1]
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        t = torch.tensor([rec.token_ids])
        free = token_logprobs(model, t, torch.ones_like(t), 1.0)[0].tolist()
    start = session.log[-1]["start"]
    gen = range(start, session.log[-1]["end"])
    assert session.log[-1]["constrained"] is True
    assert all(rec.logprobs[i] >= free[i] - TOL for i in gen), "masked: at least the free log-prob"
    assert any(rec.logprobs[i] > free[i] + 1e-3 for i in gen), "the mask renormalised somewhere"
    gateway.close_session(session.key)
