"""Long tool episodes (30+ turns) under a context budget: tool outputs cut to `rollout.max_tool_output_tokens`
with a marker the model sees, older output elided at `rollout.max_context_tokens`, the window's truncation
recorded, and the token record exactly what the model saw throughout."""
from __future__ import annotations

import pytest

from rlvr.config import RolloutConfig, RunConfig
from rlvr.envs.context import TOOL_CUT, cap_tokens
from rlvr.errors import UserError
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies.hf import HFPolicy, sequence_logprobs
from rlvr.rollout.policy import SamplingParams
from rlvr.tasks.spec import Task, TaskLimits

from .test_runner import Forced, aligned, tc

LOG = "".join(f"line {i}: step {i * 7 % 13} ok\n" for i in range(150))


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> HFPolicy:
    """The tiny model with a window of 8k positions (a 30-turn character-level episode is long)."""
    from rlvr.rollout.policies.builtin import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("wide"), n_layer=1, n_embd=32, n_head=2, n_positions=8192,
                            seed=4)
    return HFPolicy(path, device="cpu", threads=1)


def forced(policy: HFPolicy, turns: list[str]) -> Forced:
    f = Forced.__new__(Forced)
    f.__dict__.update(policy.__dict__)
    f.turns = turns
    return f


def long_task(turns: int) -> Task:
    return Task(id="long", domain="toy", prompt="Read the log until you are sure.",
                workspace={"log.txt": LOG},
                verifier={"kind": "test-rollout-file"},
                limits=TaskLimits(max_turns=turns + 4, max_tokens=100_000))


def exact(policy: HFPolicy, ep) -> None:
    assert aligned(ep)
    ref = sequence_logprobs(policy.model, ep.token_ids)
    gen = [(r, lp) for r, lp, m in zip(ref, ep.logprobs, ep.loss_mask) if m]
    assert gen and max(abs(r - lp) for r, lp in gen) < 1e-4


def test_a_thirty_two_turn_tool_episode_keeps_its_record_exact(wide: HFPolicy, pool) -> None:
    policy = forced(wide, [tc("read_file", path="log.txt")] * 31 + [tc("submit")])
    cfg = RolloutConfig(max_context_tokens=5000, max_tool_output_tokens=120)
    [ep] = EnvRollouts(policy, pool, config=cfg,
                       sampling=SamplingParams(max_new_tokens=120)).run([long_task(32)], 1)
    assert ep.status == "done" and ep.num_turns == 32
    assert ep.metadata["tool_outputs_cut"] == 31
    tools = [m for m in ep.messages if m.role == "tool"]
    assert all("tokens of output cut" in m.content for m in tools[:-1] if not m.elided)  # the last: submit's
    assert ep.context_elided and any(m.elided for m in tools) and not tools[-2].elided
    assert len(ep.token_ids) <= 5000  # the budget, below the 8k window
    assert "tokens of output cut" in wide.tokenizer.decode(ep.token_ids)  # the marker is what the model read
    exact(wide, ep)


def test_a_context_that_runs_out_truncates_by_context(wide: HFPolicy, pool) -> None:
    policy = forced(wide, [tc("read_file", path="log.txt")] * 40)
    cfg = RolloutConfig(max_context_tokens=2500, max_tool_output_tokens=60)
    [ep] = EnvRollouts(policy, pool, config=cfg,
                       sampling=SamplingParams(max_new_tokens=120)).run([long_task(40)], 1)
    assert ep.status == "truncated" and ep.truncated_by == "context" and ep.context_elided
    assert 10 < ep.num_turns < 40 and len(ep.token_ids) <= 2500
    exact(wide, ep)


def test_cap_tokens_keeps_head_and_tail_around_a_marker(wide: HFPolicy) -> None:
    text, cut = cap_tokens(LOG, 90, wide.encode, wide.decode)
    ids = wide.encode(LOG)
    assert cut == len(ids) - 90 and text.startswith(LOG[:30]) and text.endswith(LOG[-60:])
    assert TOOL_CUT.format(n=cut) in text
    assert cap_tokens("short", 90, wide.encode, wide.decode) == ("short", 0)


def test_a_micro_batch_budget_below_the_context_budget_is_refused() -> None:
    with pytest.raises(UserError, match=r"\[train.micro_batch_tokens\].*at least 4096"):
        RunConfig.model_validate({"train": {"micro_batch_tokens": 1024},
                                  "rollout": {"max_context_tokens": 4096}})


def test_an_episode_whose_record_starts_over_trains_every_segment_on_what_the_model_saw(wide: HFPolicy,
                                                                                         pool) -> None:
    """Elision rewrites earlier text, so the record starts over; the generated tokens before it used to lose
    their loss mask, and now train as a segment of their own."""
    from rlvr.rollout.episode import split_segments

    policy = forced(wide, [tc("read_file", path="log.txt")] * 23 + [tc("submit")])
    cfg = RolloutConfig(max_context_tokens=2500, max_tool_output_tokens=150)
    [ep] = EnvRollouts(policy, pool, config=cfg,
                       sampling=SamplingParams(max_new_tokens=120)).run([long_task(24)], 1)
    assert ep.context_elided and ep.metadata["token_restarts"] >= 1
    records = split_segments([ep])
    assert len(records) == 1 + len(ep.metadata["segments"]) >= 2
    for rec in records:  # each exactly what the model saw when it sampled its tokens
        exact(wide, rec)
    # every generated token is trained once: in the segment that holds it with its real prefix
    assert sum(sum(r.loss_mask) for r in records) == ep.num_generated_tokens
