"""Advantage estimators against hand-computed values."""
from __future__ import annotations

import math

import pytest

from rlvr.errors import UserError
from rlvr.rollout.core.groups import zero_variance_groups
from rlvr.rollout.episode import Episode
from rlvr.train.advantages import ADVANTAGES, episode_advantages, estimator, turn_advantages, turn_spans
from rlvr.train.update import samples_from
from rlvr.verify.verdict import Verdict


def test_grpo_by_hand() -> None:
    # rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3)
    adv = ADVANTAGES["grpo"]([1.0, 0.0, 0.0, 1.0])
    std = math.sqrt(1 / 3)
    assert adv == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), -0.5 / (std + 1e-4),
                                 0.5 / (std + 1e-4)])


def test_dr_grpo_by_hand() -> None:
    assert ADVANTAGES["dr_grpo"]([1.0, 0.0, 0.0, 0.0]) == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_rloo_by_hand() -> None:
    # r_i minus the mean of the others: 1 - 0, 0 - 1/3
    assert ADVANTAGES["rloo"]([1.0, 0.0, 0.0, 0.0]) == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert ADVANTAGES["rloo"]([0.5]) == [0.0]


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_equal_rewards_give_zero_advantage(name: str) -> None:
    assert ADVANTAGES[name]([0.7, 0.7, 0.7]) == pytest.approx([0.0, 0.0, 0.0])
    assert ADVANTAGES[name]([]) == []


def test_unknown_estimator_is_a_user_error() -> None:
    with pytest.raises(UserError, match="did you mean|use one of"):
        estimator("gpro")


def _ep(task: str, reward: float, masked: bool = False) -> Episode:
    verdict = Verdict.infra("sandbox died") if masked else Verdict(score=reward, passed=reward == 1.0)
    return Episode(task_id=task, domain="code", group_id=f"g-{task}", reward=reward, verdict=verdict,
                   status="infra_error" if masked else "done")


def test_masked_episodes_are_left_out_of_their_group() -> None:
    eps = [_ep("a", 1.0), _ep("a", 0.0), _ep("a", 0.0, masked=True), _ep("b", 1.0), _ep("b", 1.0)]
    adv = episode_advantages(eps, "dr_grpo")
    assert eps[2].episode_id not in adv  # an infra fault is masked, never scored 0
    assert adv[eps[0].episode_id] == pytest.approx(0.5)
    assert adv[eps[1].episode_id] == pytest.approx(-0.5)
    assert adv[eps[3].episode_id] == adv[eps[4].episode_id] == 0.0
    assert zero_variance_groups(eps) == ["g-b"]


def _turns(task: str, reward: float, turns: int, segments: bool = False) -> Episode:
    """An episode of `turns` generated turns (3 tokens each, 2 tokens of env text between them)."""
    mask = [0, 0] + [m for _ in range(turns) for m in (1, 1, 1, 0, 0)]
    meta = {"segments": [{"token_ids": [1], "loss_mask": [1], "logprobs": [0.0]}]} if segments else {}
    return _ep(task, reward).model_copy(update={
        "token_ids": list(range(len(mask))), "loss_mask": mask, "logprobs": [0.0] * len(mask),
        "metadata": meta})


def test_turn_spans_are_the_runs_of_generated_tokens() -> None:
    assert turn_spans([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]
    assert turn_spans([0, 0]) == []


def test_each_turn_is_compared_with_the_episodes_that_reached_it() -> None:
    # passed at turn 1, passed at turn 2, failed both, failed both
    eps = [_turns("a", 1.0, 1), _turns("a", 1.0, 2), _turns("a", 0.0, 2), _turns("a", 0.0, 2)]
    whole = episode_advantages(eps, "dr_grpo")
    turns = turn_advantages(eps, "dr_grpo", whole)
    assert [turns[e.episode_id][0] for e in eps] == pytest.approx([whole[e.episode_id] for e in eps])
    # turn 2: three episodes reached it, one of them passed: mean 1/3
    assert [turns[e.episode_id][1] for e in eps[1:]] == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert sum(turns[e.episode_id][1] for e in eps[1:]) == pytest.approx(0.0)
    # against the whole group's baseline (0.5) the later turns would sum to -0.5
    assert sum(whole[e.episode_id] for e in eps[1:]) == pytest.approx(-0.5)


def test_a_turn_only_one_episode_reached_gets_no_advantage_and_segments_keep_theirs() -> None:
    eps = [_turns("a", 1.0, 1), _turns("a", 0.0, 2), _turns("a", 0.0, 3, segments=True)]
    whole = episode_advantages(eps, "dr_grpo")
    turns = turn_advantages(eps, "dr_grpo", whole)
    assert turns[eps[1].episode_id] == pytest.approx([whole[eps[1].episode_id], 0.0])
    # the restarted record keeps its episode advantage on every one of its turns
    sample = samples_from(eps, whole, turns)[2]
    assert sample.token_advantages is not None
    generated = {sample.token_advantages[i] for i, m in enumerate(eps[2].loss_mask) if m}
    assert generated == {whole[eps[2].episode_id]}


def test_samples_carry_each_turns_advantage_on_its_tokens() -> None:
    eps = [_turns("a", 1.0, 1), _turns("a", 1.0, 2), _turns("a", 0.0, 2), _turns("a", 0.0, 2)]
    whole = episode_advantages(eps, "dr_grpo")
    turns = turn_advantages(eps, "dr_grpo", whole)
    samples = samples_from(eps, whole, turns)
    adv = samples[1].token_advantages
    assert adv is not None and len(adv) == len(eps[1].token_ids)
    spans = turn_spans(eps[1].loss_mask)
    assert [adv[i] for i in range(*spans[0])] == pytest.approx([turns[eps[1].episode_id][0]] * 3)
    assert [adv[i] for i in range(*spans[1])] == pytest.approx([turns[eps[1].episode_id][1]] * 3)
    assert all(adv[i] == 0.0 for i, m in enumerate(eps[1].loss_mask) if not m)
    assert samples_from(eps, episode_advantages(eps, "dr_grpo"))[1].token_advantages is None
