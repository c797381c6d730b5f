"""GRPO groups and the one zero-variance rule, shared by the update, the scheduler and the monitor."""
from __future__ import annotations

from rlvr.rollout.core.groups import group_key, group_rewards, is_zero_variance, zero_variance_groups
from rlvr.rollout.episode import Episode
from rlvr.verify.verdict import Verdict


def ep(group: str, reward: float, *, masked: bool = False, task: str = "t", step: int = 0) -> Episode:
    verdict = Verdict.infra("sandbox died") if masked else Verdict(score=reward, passed=reward == 1.0)
    return Episode(task_id=task, domain="code", step=step, group_id=group, reward=0.0 if masked else reward,
                   verdict=verdict, status="infra_error" if masked else "done")


def test_zero_variance_groups_follow_one_rule() -> None:
    eps = [ep("g0", 1.0), ep("g0", 1.0),            # equal rewards
           ep("g1", 1.0), ep("g1", 0.0),            # a signal
           ep("g2", 0.0), ep("g2", 1.0, masked=True),  # one judged episode: nothing to compare with
           ep("g3", 0.0, masked=True),              # only masked: masked, not uninformative
           ep("g4", 0.5), ep("g4", 0.5 + 1e-12)]    # equal within float noise
    assert zero_variance_groups(eps) == ["g0", "g2", "g4"]
    assert group_rewards(eps)["g3"] == [] and group_rewards(eps)["g2"] == [0.0]
    assert not is_zero_variance([]) and is_zero_variance([0.3]) and not is_zero_variance([0.5, 0.5 + 1e-6])


def test_episodes_without_a_group_id_are_grouped_by_step_and_task() -> None:
    a, b, c = ep("", 1.0, task="x"), ep("", 0.0, task="x"), ep("", 1.0, task="x", step=1)
    assert group_key(a) == group_key(b) != group_key(c)
    assert zero_variance_groups([a, b, c]) == [group_key(c)]
