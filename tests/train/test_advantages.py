"""Advantage estimators against hand-computed values."""
from __future__ import annotations

import math

import pytest

from rlvr.errors import UserError
from rlvr.rollout.core.groups import zero_variance_groups
from rlvr.rollout.episode import Episode
from rlvr.train.advantages import ADVANTAGES, episode_advantages, estimator
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
