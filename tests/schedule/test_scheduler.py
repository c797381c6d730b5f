"""The Scheduler: mixing, tiers, procedural draws, feedback, budgets, retention and exact resume."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.config import RunConfig, ScheduleConfig
from rlvr.errors import UserError
from rlvr.run import selections
from rlvr.schedule import Scheduler
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain
from rlvr.tasks.selection import Selection
from rlvr.tasks.spec import TaskLimits


def scheduler_of(cfg: RunConfig, held_out=None) -> Scheduler:
    """The scheduler a run builds from its config (`rlvr.run.build_trainer`)."""
    return Scheduler(selections(cfg.tasks.train, cfg), cfg.schedule, seed=cfg.seed,
                     heldout_offset=cfg.tasks.heldout_offset, held_out=held_out)

def keys(batch: list) -> list[str]:
    return [t.key for t in batch]


def test_same_seed_same_batches_other_seed_other_batches(make: SimpleNamespace) -> None:
    CountingSource, finite, episode = make.CountingSource, make.finite, make.episode
    def run(seed: int) -> list[list[str]]:
        s = Scheduler({"a": finite("a", 30), "proc": CountingSource()}, ScheduleConfig(), seed=seed)
        out = []
        for step in range(5):
            batch = s.sample(6)
            out.append(keys(batch))
            s.observe([episode(t, i % 2 == 0, step=step) for i, t in enumerate(batch)])
        return out

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_weights_and_quotas_shape_every_batch(make: SimpleNamespace) -> None:
    finite = make.finite
    s = Scheduler({"a": finite("a", 50), "b": finite("b", 50), "c": finite("c", 50)},
                  ScheduleConfig(weights={"a": 3, "b": 1, "c": 0}, quotas={"c": 1}), seed=0)
    for _ in range(20):
        domains = Counter(t.domain for t in s.sample(9))
        assert domains == {"a": 6, "b": 2, "c": 1}


def test_a_batch_draws_distinct_tasks_until_the_pool_runs_out(make: SimpleNamespace) -> None:
    finite = make.finite
    s = Scheduler({"a": finite("a", 5)}, ScheduleConfig(), seed=0)
    assert len(set(keys(s.sample(5)))) == 5
    big = keys(s.sample(12))
    assert len(big) == 12 and set(big) == {f"a/a{i}" for i in range(5)}


def test_tasks_always_or_never_solved_are_sampled_less(make: SimpleNamespace) -> None:
    finite, episode = make.finite, make.episode
    cfg = ScheduleConfig(outside_band_weight=0.2)
    src = finite("a", 30)
    s = Scheduler({"a": src}, cfg, seed=0)
    s.sample(30)  # every task served once, so its index is known
    tasks = list(src)
    outcome = {t.key: [True] * 4 if i < 10 else [False] * 4 if i < 20 else [True, False] * 2
               for i, t in enumerate(tasks)}
    s.observe([episode(t, p, group=t.id) for t in tasks for p in outcome[t.key]])
    assert {s.tier(t) for t in tasks[:10]} == {"always"} and {s.tier(t) for t in tasks[10:20]} == {"never"}
    assert {s.tier(t) for t in tasks[20:]} == {"learnable"}
    seen = Counter()
    for _ in range(300):
        seen.update(s.tier(k) for k in keys(s.sample(3)))
    # weights 0.2 : 0.2 : 1 over 10 tasks each: learnable is drawn about five times as often as either
    assert seen["learnable"] > 3 * seen["always"] and seen["learnable"] > 3 * seen["never"]
    assert seen["always"] > 0 and seen["never"] > 0
    assert s.metrics()["schedule/learnable_share"] == pytest.approx(1 / 3)


def test_zero_outside_weight_with_nothing_learnable_still_samples(make: SimpleNamespace) -> None:
    finite, episode = make.finite, make.episode
    s = Scheduler({"a": finite("a", 3)}, ScheduleConfig(outside_band_weight=0.0), seed=0)
    batch = s.sample(3)
    s.observe([episode(t, True) for t in batch])
    assert len(s.sample(3)) == 3


def test_masked_episodes_never_count_towards_pass_rates(make: SimpleNamespace) -> None:
    finite, episode = make.finite, make.episode
    s = Scheduler({"a": finite("a", 2)}, ScheduleConfig(), seed=0)
    a0, a1 = sorted(s.sample(2), key=lambda t: t.id)
    s.observe([episode(a0, False, infra=True), episode(a0, False, infra=True),
               episode(a1, True), episode(a1, False, infra=True)])
    assert s.table.rate(a0.key) is None
    assert s.table.rate(a1.key) == 1.0
    assert s.metrics()["schedule/masked_episodes"] == 3


def test_procedural_draws_fresh_indices_below_heldout_and_revisits_known(make: SimpleNamespace) -> None:
    CountingSource, episode = make.CountingSource, make.episode
    src = CountingSource()
    s = Scheduler({"proc": src}, ScheduleConfig(fresh_share=0.5), seed=0, heldout_offset=40)
    for step in range(30):
        batch = s.sample(4)
        assert len(set(keys(batch))) == 4
        s.observe([episode(t, t.index % 3 == 0, step=step) for t in batch])
    assert max(src.asked) < 40 and set(src.asked) == set(range(40))
    assert len(src.asked) == 120  # revisits: far more draws than distinct tasks


def test_procedural_fresh_share_one_never_revisits_zero_always_revisits(make: SimpleNamespace) -> None:
    CountingSource = make.CountingSource
    src = CountingSource()
    s = Scheduler({"proc": src}, ScheduleConfig(fresh_share=1.0), seed=0)
    for _ in range(5):
        s.sample(4)
    assert src.asked == list(range(20))
    src2 = CountingSource()
    s2 = Scheduler({"proc": src2}, ScheduleConfig(fresh_share=0.0), seed=0)
    s2.sample(4)
    s2.sample(4)
    assert sorted(src2.asked[4:]) == [0, 1, 2, 3]


def test_procedural_sample_size_is_a_fixed_pool_and_may_not_reach_heldout(make: SimpleNamespace) -> None:
    CountingSource = make.CountingSource
    src = CountingSource()
    s = Scheduler([Selection(src, 6)], ScheduleConfig(), seed=0, heldout_offset=100)
    for _ in range(10):
        s.sample(4)
    assert set(src.asked) <= set(range(6))
    with pytest.raises(UserError, match="held-out range"):
        Scheduler([Selection(CountingSource(), 200)], ScheduleConfig(), heldout_offset=100)
    with pytest.raises(UserError, match=r"\[tasks.heldout_offset\]"):
        Scheduler({"proc": CountingSource()}, ScheduleConfig(), heldout_offset=0)


def test_zero_variance_groups_are_counted(make: SimpleNamespace) -> None:
    finite, episode = make.finite, make.episode
    s = Scheduler({"a": finite("a", 4)}, ScheduleConfig(), seed=0)
    a0, a1, a2, a3 = sorted(s.sample(4), key=lambda t: t.id)
    eps = [episode(a0, True, group="g0"), episode(a0, True, group="g0"),
           episode(a1, True, group="g1"), episode(a1, False, group="g1"),
           episode(a2, False, group="g2"), episode(a2, True, group="g2", infra=True),
           episode(a3, False, group="g3", infra=True),
           episode(a1, False, group="g4", reward=0.5), episode(a1, False, group="g4", reward=0.5 + 1e-12)]
    metrics = s.observe(eps)
    assert metrics["schedule/groups"] == 5 and metrics["schedule/zero_variance_groups"] == 3
    assert metrics["schedule/group_reward_var"] == pytest.approx(0.25 / 4)


def test_budgets_by_domain_then_tier_are_applied_to_sampled_tasks(make: SimpleNamespace) -> None:
    finite, episode = make.finite, make.episode
    cfg = ScheduleConfig.model_validate({"tier_budgets": {"never": {"max_tokens": 32}},
                                         "domain_budgets": {"a": {"max_turns": 3, "max_tokens": 128}}})
    s = Scheduler({"a": finite("a", 1), "b": finite("b", 1)}, cfg, seed=0)
    batch = {t.domain: t for t in s.sample(2)}
    assert batch["a"].limits == TaskLimits(max_turns=3, max_tokens=128)
    assert batch["b"].limits == TaskLimits()
    s.observe([episode(batch["a"], False)])
    assert s.budget_for(batch["a"]) == TaskLimits(max_turns=3, max_tokens=32)
    assert {t.domain: t for t in s.sample(2)}["a"].limits.max_tokens == 32


@pytest.mark.parametrize(("cfg", "match"), [
    ({"weights": {"aa": 1.0}}, r"\[schedule.weights.aa\].*did you mean 'a'"),
    ({"quotas": {"a": -1}}, r"\[schedule.quotas.a\]: must be a finite number >= 0"),
    ({"weights": {"a": -0.5}}, r"\[schedule.weights.a\]"),
    ({"weights": {"a": float("inf")}}, r"\[schedule.weights.a\]: must be a finite number"),
    ({"tier_budgets": {"learnble": {"max_turns": 2}}}, r"did you mean 'learnable'"),
    ({"domain_budgets": {"zz-not-a-domain": {"max_turns": 2}}},
     r"\[schedule.domain_budgets.zz-not-a-domain\]"),
])
def test_config_names_are_checked_against_the_task_mix(cfg: dict, match: str, make: SimpleNamespace) -> None:
    finite = make.finite
    with pytest.raises(UserError, match=match):
        Scheduler({"a": finite("a", 2)}, ScheduleConfig.model_validate(cfg))


def _drive(s: Scheduler, steps: int, episode, start: int = 0) -> list[list[str]]:
    out = []
    for step in range(start, start + steps):
        batch = s.sample(5)
        out.append(keys(batch))
        s.observe([episode(t, (len(t.id) + i + step) % 3 == 0, step=step, group=f"{step}-{i}")
                   for i, t in enumerate(batch)])
    return out


def test_state_dict_resumes_exactly_through_json(make: SimpleNamespace) -> None:
    CountingSource, finite, episode = make.CountingSource, make.finite, make.episode
    def build() -> Scheduler:
        return Scheduler({"a": finite("a", 12), "proc": CountingSource()}, ScheduleConfig(), seed=7)

    uninterrupted = build()
    whole = _drive(uninterrupted, 8, episode)
    first = build()
    head = _drive(first, 4, episode)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = build()
    resumed.load_state_dict(state)
    assert head + _drive(resumed, 4, episode, start=4) == whole
    assert resumed.state_dict() == uninterrupted.state_dict()


def test_loading_a_foreign_or_broken_state_is_a_user_error(make: SimpleNamespace) -> None:
    finite = make.finite
    s = Scheduler({"a": finite("a", 3)}, ScheduleConfig())
    other = Scheduler({"b": finite("b", 3)}, ScheduleConfig())
    with pytest.raises(UserError, match="same tasks"):
        s.load_state_dict(other.state_dict())
    broken = s.state_dict()
    broken["rng"] = "garbage"
    with pytest.raises(UserError, match="malformed scheduler state"):
        s.load_state_dict(broken)
    del broken["streams"]
    with pytest.raises(UserError, match="malformed"):
        s.load_state_dict(broken)


def test_pass_rates_carry_over_to_the_next_run(tmp_path: Path, make: SimpleNamespace) -> None:
    CountingSource, episode = make.CountingSource, make.episode
    first = Scheduler({"proc": CountingSource()}, ScheduleConfig(fresh_share=1.0), seed=0)
    _drive(first, 3, episode)
    path = first.save_pass_rates(tmp_path / "pass_rates.json")
    src = CountingSource()
    nxt = Scheduler({"proc": src}, ScheduleConfig(pass_rates_from=str(path), fresh_share=1.0), seed=0)
    assert nxt.table.to_dict() == first.table.to_dict()
    nxt.sample(3)
    assert src.asked == [15, 16, 17]  # fresh indices continue after the known ones
    revisit = CountingSource()
    again = Scheduler({"proc": revisit}, ScheduleConfig(pass_rates_from=str(path), fresh_share=0.0), seed=0)
    again.sample(5)
    assert set(revisit.asked) <= set(range(15))


def test_from_config_resolves_the_train_spec_with_domain_settings(make: SimpleNamespace) -> None:
    finite = make.finite
    from pydantic import BaseModel

    class Settings(BaseModel):
        size: int = 3

    name = "schedtestdomain"
    registry.unregister(name)
    registry.register(Domain(name, lambda c: finite(name, c.size), Settings, description="test domain"))
    try:
        cfg = RunConfig.model_validate({"seed": 2, "tasks": {"train": name, "domains": {name: {"size": 5}}},
                                        "schedule": {"quotas": {name: 1}}})
        s = scheduler_of(cfg)
        assert s.domains == [name]
        assert len(set(keys(s.sample(5)))) == 5
    finally:
        registry.unregister(name)


def test_heldout_tasks_of_a_finite_domain_are_never_drawn_for_training() -> None:
    from rlvr.run import heldout_indices, heldout_tasks

    cfg = RunConfig.model_validate({"tasks": {"train": "humaneval", "heldout": "humaneval:40"}})
    held = {t.id for t in heldout_tasks(cfg)}
    assert len(held) == 40

    def drawn(s: Scheduler) -> set[str]:
        return {t.id for _ in range(60) for t in s.sample(8)}

    fair = drawn(scheduler_of(cfg, held_out=heldout_indices(cfg)))
    assert not fair & held and len(fair) > 80
    assert drawn(scheduler_of(cfg)) & held  # without the exclusion the pools overlap


def test_a_training_sample_larger_than_what_the_heldout_set_leaves_is_a_user_error() -> None:
    from rlvr.run import heldout_indices

    cfg = RunConfig.model_validate({"tasks": {"train": "humaneval:150", "heldout": "humaneval:20"}})
    with pytest.raises(UserError, match="left outside the held-out set") as info:
        scheduler_of(cfg, held_out=heldout_indices(cfg))
    assert info.value.field == "tasks.train"
    everything = RunConfig.model_validate({"tasks": {"train": "humaneval", "heldout": "humaneval"}})
    with pytest.raises(UserError, match="none is left to train on"):
        scheduler_of(everything, held_out=heldout_indices(everything))
