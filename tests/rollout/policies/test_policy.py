"""The Policy contract's records: sampling parameters from the config, completion token counts."""
from __future__ import annotations

from rlvr.config import PolicyConfig
from rlvr.rollout.policy import Completion, SamplingParams


def test_sampling_from_config() -> None:
    sp = SamplingParams.from_config(PolicyConfig(temperature=0.5, top_p=0.9, max_new_tokens=12))
    assert (sp.temperature, sp.top_p, sp.max_new_tokens, sp.budget(0)) == (0.5, 0.9, 12, 12)
    assert SamplingParams(max_new_tokens=12, budgets=(3, 40)).budget(1) == 12


def test_completion_token_count() -> None:
    assert Completion(text="abcdefgh", token_ids=[1, 2, 3]).num_tokens == 3
    assert Completion(text="abcdefgh", logprobs=[-1.0]).num_tokens == 1
    assert Completion(text="abcdefghi").num_tokens == 3
