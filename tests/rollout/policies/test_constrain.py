"""The hf backend under a grammar: every turn matches it, each token's recorded log-prob is the masked
distribution's exactly (the trainer's, recomputed with the same mask), free rows beside it are untouched, and
`on_token` sees each token as it is sampled, with its top alternatives."""
from __future__ import annotations

import json

import pytest
import torch

from rlvr.envs.messages import Message
from rlvr.rollout.policies.constrain import RowConstraints
from rlvr.rollout.policy import SamplingParams

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
          "required": ["ok", "n"], "additionalProperties": False}
GRAMMAR = "start: %json " + json.dumps(SCHEMA)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_a_constrained_turn_matches_and_its_logprobs_are_the_masked_distributions(tiny, temperature):
    conv = [Message(role="user", content="Answer in JSON.")]
    seen: list[tuple[int, int, float, dict | None]] = []
    sp = SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=60, seeds=(1, 2, 3),
                        constraints=(GRAMMAR, None, GRAMMAR), top_logprobs=2,
                        on_token=lambda *a: seen.append(a))
    free = tiny.generate([conv], SamplingParams(temperature=temperature, max_new_tokens=60, seeds=(2,)))[0]
    comps = tiny.generate([conv, conv, conv], sp)
    assert comps[1].token_ids == free.token_ids, "a free row beside constrained ones samples as alone"
    for row, comp in enumerate(comps):
        assert [t for r, t, _, _ in seen if r == row] == comp.token_ids, "streamed as sampled, in order"
        assert [lp for r, _, lp, _ in seen if r == row] == comp.logprobs
        assert len(comp.top_logprobs) == len(comp.token_ids)
        if row == 1:
            continue
        if comp.finish_reason == "stop":
            assert set(json.loads(comp.text)) == {"ok", "n"}
        rows = RowConstraints(tiny.tokenizer, tiny.eos_ids, [GRAMMAR], len(tiny.tokenizer))
        ids = comp.prompt_token_ids + comp.token_ids
        with torch.no_grad():
            logits = tiny.model(torch.tensor([ids])).logits[0, len(comp.prompt_token_ids) - 1:-1].float()
        for k, tok in enumerate(comp.token_ids):
            allowed = rows.allowed(0)
            masked = logits[k].masked_fill(~allowed[:logits.shape[-1]], float("-inf"))
            lp = torch.log_softmax(masked / temperature if temperature > 0 else masked, -1)[tok].item()
            assert abs(lp - comp.logprobs[k]) < 1e-4, (k, lp, comp.logprobs[k])
            assert comp.top_logprobs[k] and all(allowed[t] for t in comp.top_logprobs[k])
            rows.advance([0], [tok], [True])


def test_a_grammar_that_does_not_compile_fails_the_call(tiny):
    with pytest.raises(ValueError, match="does not compile"):
        tiny.generate([[Message(role="user", content="x")]],
                      SamplingParams(max_new_tokens=4, constraints=("start: %json {\"type\": 3}",)))
