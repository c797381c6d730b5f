"""A 32-turn tool episode through SmolLM2-135M-Instruct's own chat template, under a context budget.

Every turn is a tool call the model is made to say, through the hf backend's own generation path (its sampler
handed the planned tokens, with the model's log-probs of them): so the episode runs with the KV cache of each
turn reused by the next (kvcache.PrefixCache), and is as long as the script. Tool outputs are cut to
`rollout.max_tool_output_tokens` with a marker the model reads, older outputs are elided when the context
budget is reached, and the token record stays what the model saw: each turn's prompt is the record so far,
the final record is the template's rendering of the (elided) transcript, and every trained token has the
log-prob of one forward pass over the whole record.
"""
from __future__ import annotations

import json
import threading

import pytest
import torch

from rlvr.config import RolloutConfig
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies import hf
from rlvr.rollout.policies.hf import HFPolicy, sequence_logprobs
from rlvr.rollout.policies.kvcache import PrefixCache
from rlvr.rollout.policy import SamplingParams
from rlvr.tasks.spec import Task, TaskLimits

pytestmark = pytest.mark.real

LOG = "".join(f"line {i}: step {i * 7 % 13} ok\n" for i in range(150))
TOLERANCE = 1e-3
"""Log-prob agreement between cached, batched generation and one unpadded forward pass (float32)."""


def tc(name: str, **args) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


class Planned(HFPolicy):
    """The real model made to say `turns` (one per assistant turn) through HFPolicy's generation: the sampler
    takes the planned token of each row and step, with its log-prob under the model."""

    turns: list[str]
    prompts: list[list[int]]
    local = threading.local()

    def generate(self, conversations, params, *, prompt_token_ids=None):
        eos = min(self.eos_ids)
        Planned.local.plan = [self.encode(self.turns[min(sum(m.role == "assistant" for m in c),
                                                         len(self.turns) - 1)])
                              + [eos] for c in conversations]
        self.prompts.extend(list(p) for p in prompt_token_ids)
        return super().generate(conversations, params, prompt_token_ids=prompt_token_ids)


def planned_noise(seeds, steps, device):
    rows = Planned.local.plan
    eos = rows[0][-1]
    return torch.tensor([(r + [eos] * steps)[:steps] for r in rows], dtype=torch.float64, device=device)


def planned_tokens(logits, temperature, top_p, noise):
    tok = noise.long()
    return tok, (logits / (temperature or 1.0)).log_softmax(-1).gather(-1, tok[:, None]).squeeze(-1)


@pytest.fixture
def planned(real, monkeypatch) -> Planned:
    monkeypatch.setattr(hf, "row_noise", planned_noise)
    monkeypatch.setattr(hf, "sample_tokens", planned_tokens)
    p = Planned.__new__(Planned)
    p.__dict__.update(real.__dict__)
    p.max_context = 8192  # SmolLM2's window (the session fixture keeps 1024 for the short tests)
    p.kv_reuse = PrefixCache()
    p.prompts = []
    return p


def long_task(turns: int) -> Task:
    return Task(id="long", domain="toy", prompt="Read the log until you are sure.",
                workspace={"log.txt": LOG},
                answer="42", verifier={"kind": "answer"},
                limits=TaskLimits(max_turns=turns + 4, max_tokens=100_000, wall_s=3600.0))


@pytest.mark.timeout(1200)  # 32 turns of a 135M model on one thread of a shared CPU
def test_a_thirty_two_turn_tool_episode_on_the_real_template(planned: Planned, pool) -> None:
    planned.turns = [tc("read_file", path="log.txt")] * 31 + [tc("submit", answer="42")]
    cfg = RolloutConfig(max_context_tokens=4000, max_tool_output_tokens=100)
    eng = EnvRollouts(planned, pool, config=cfg, sampling=SamplingParams(temperature=1.0, max_new_tokens=64))
    [ep] = eng.run([long_task(32)], 1)
    assert ep.status == "done" and ep.num_turns == 32
    assert ep.metadata["tool_outputs_cut"] == 31
    tools = [m for m in ep.messages if m.role == "tool"]
    assert ep.context_elided and any(m.elided for m in tools) and not tools[-2].elided
    assert all("tokens of output cut" in m.content for m in tools[:-1] if not m.elided)
    assert len(ep.token_ids) <= 4000 and ep.metadata["elided_originals"]  # the budget, below the 8k window
    text = planned.tokenizer.decode(ep.token_ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\n") and "tokens of output cut" in text  # what the model read
    # the final record is the template's rendering of the transcript as it stands (elisions included)
    last = max(i for i, m in enumerate(ep.messages) if m.role == "assistant")  # submit's reply is not read
    expected = planned.render(ep.messages[:last + 1], add_generation_prompt=False)
    assert expected.startswith(text) and len(expected) - len(text) <= len("<|im_end|>\n")
    # each turn's prompt was the record then: the next one extends it, except where elision restarted it
    assert len(planned.prompts) == 32
    extended = sum(b[:len(a)] == a for a, b in zip(planned.prompts, planned.prompts[1:]))
    assert extended == 31 - ep.metadata["token_restarts"] and ep.metadata["token_restarts"] >= 1
    assert ep.token_ids[:len(planned.prompts[-1])] == planned.prompts[-1]
    # turns that extend the record prefill only what they added; after an elision, what follows the elided
    # (oldest) output is prefilled again, so about half of all prompt tokens come from the store here
    assert planned.kv_reuse.reused_tokens > planned.kv_reuse.prefilled_tokens
    # every trained token has its log-prob under one forward pass over the whole record (the turns since the
    # last restart: those sampled before it keep loss mask 0, their prefix having changed)
    assert len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)
    ref = sequence_logprobs(planned.model, ep.token_ids)
    diffs = [abs(r - lp) for r, lp, m in zip(ref, ep.logprobs, ep.loss_mask) if m]
    assert len(diffs) >= len(planned.encode(planned.turns[-1])) and max(diffs) < TOLERANCE, max(diffs)
    assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.loss_mask) if not m)
