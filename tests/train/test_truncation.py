"""Truncation on purpose (rlvr.train.truncation): what each choice of `train.truncation` makes of one small
batch's advantages, DAPO's overlong ramp, and the monitor's truncation shares, chart and alert."""
from __future__ import annotations

import pytest

from rlvr.config import QUICKSTART, MonitorConfig, load_config
from rlvr.errors import UserError
from rlvr.monitor.detectors import DETECTORS, History
from rlvr.monitor.metrics import compute_metrics, truncation_metrics
from rlvr.monitor.report import _metric_charts
from rlvr.rollout.episode import TOKEN_BUDGET, Episode
from rlvr.train.advantages import episode_advantages, grpo
from rlvr.train.truncation import Truncation, overlong_penalty
from rlvr.verify.verdict import Verdict

BUDGET = 100
"""Token budget of the batch below; DAPO's buffer of 0.2 ramps the penalty over tokens 80..100."""


def _ep(reward: float, tokens: int, cut: str | None = None, group: str = "g") -> Episode:
    return Episode(task_id="t", domain="code", group_id=group, reward=reward,
                   verdict=Verdict(score=reward, passed=reward == 1.0), num_generated_tokens=tokens,
                   status="truncated" if cut else "done", truncated_by=cut, metadata={TOKEN_BUDGET: BUDGET})


def _batch() -> list[Episode]:
    """One group: a pass, a short clean failure, a long pass inside the buffer, a half-done episode the token
    budget cut, a failure the turn budget cut."""
    return [_ep(1.0, 40), _ep(0.0, 30), _ep(1.0, 90), _ep(0.5, BUDGET, "tokens"), _ep(0.0, 60, "turns")]


def _advantages(mode: str, batch: list[Episode]) -> dict[str, float]:
    learn, _ = Truncation(mode).apply(batch)
    return episode_advantages(learn, "grpo")


def test_each_choice_gives_a_truncated_episode_a_different_lesson() -> None:
    batch = _batch()
    ids = [ep.episode_id for ep in batch]
    scored, masked, overlong = (_advantages(m, batch) for m in ("score", "mask", "overlong"))
    # score: the verdicts as they stand; the half-done cut episode ranks above the clean failures
    assert [scored[i] for i in ids] == pytest.approx(grpo([1.0, 0.0, 1.0, 0.5, 0.0]))
    assert scored[ids[3]] > scored[ids[1]] == scored[ids[4]]
    # mask: the cut episodes teach nothing and leave the group's baseline alone
    assert set(masked) == set(ids[:3])
    assert [masked[i] for i in ids[:3]] == pytest.approx(grpo([1.0, 0.0, 1.0]))
    # overlong: DAPO's ramp: 90 of 100 tokens costs half the penalty, the token budget's cut all of it, the
    # turn budget's cut at 60 tokens nothing
    assert [overlong[i] for i in ids] == pytest.approx(grpo([1.0, 0.0, 0.5, -0.5, 0.0]))
    assert overlong[ids[3]] < overlong[ids[1]] == overlong[ids[4]]
    assert overlong[ids[2]] < overlong[ids[0]]
    # the stored episodes keep their verdicts' rewards: only the update sees the shaped ones
    assert [ep.reward for ep in batch] == [1.0, 0.0, 1.0, 0.5, 0.0]


def test_the_counts_say_what_was_done() -> None:
    batch = _batch() + [_ep(0.0, 10, "wall").model_copy(update={"status": "infra_error"})]
    assert Truncation("score").apply(batch)[1] == {"truncation/scored": 2.0}
    learn, counts = Truncation("mask").apply(batch)
    assert counts == {"truncation/masked": 2.0} and len(learn) == 4  # the infra fault stays masked as before
    learn, counts = Truncation("overlong", buffer=0.2, penalty=1.0).apply(batch)
    assert counts == {"truncation/overlong_penalty_mean": pytest.approx(1.5 / 5)}
    assert learn[-1].reward == 0.0  # a masked episode is never shaped


@pytest.mark.parametrize(("tokens", "cut", "cost"), [
    (0, None, 0.0), (80, None, 0.0), (85, None, 0.25), (90, None, 0.5), (100, None, 1.0), (130, None, 1.0),
    (40, "tokens", 1.0), (99, "turns", 0.95), (99, "context", 0.95)])
def test_overlong_ramp_is_dapos(tokens: int, cut: str | None, cost: float) -> None:
    assert overlong_penalty(_ep(0.0, tokens, cut), 0.2, 1.0) == pytest.approx(cost)
    assert overlong_penalty(_ep(0.0, tokens, cut), 0.2, 0.5) == pytest.approx(cost / 2)


def test_an_episode_without_a_budget_pays_only_for_the_token_cut() -> None:
    bare = Episode(task_id="t", domain="code", num_generated_tokens=10_000, status="done")
    assert overlong_penalty(bare, 0.2, 1.0) == 0.0
    assert overlong_penalty(bare.model_copy(update={"status": "truncated", "truncated_by": "tokens"}),
                            0.2, 1.0) == 1.0


def test_the_choice_is_a_setting_and_a_bad_one_is_refused() -> None:
    # a cut episode is never a clean failure unless the run says so; the quickstart says so in its own file
    assert load_config(None, []).train.truncation == "mask"
    assert load_config(QUICKSTART).train.truncation == "score"
    cfg = load_config(None, ["train.truncation=overlong", "train.overlong_buffer=0.25"]).train
    assert (cfg.truncation, cfg.overlong_buffer, cfg.overlong_penalty) == ("overlong", 0.25, 1.0)
    with pytest.raises(UserError, match="train.truncation"):
        load_config(None, ["train.truncation=drop"])


def test_the_monitor_counts_truncation_per_budget_and_charts_it() -> None:
    eps = _batch() + [_ep(0.0, 5, "wall"), _ep(0.0, 5, "sandbox")]
    m = truncation_metrics(eps)
    assert m["truncation/rate"] == pytest.approx(4 / 7)
    assert (m["truncation/tokens"], m["truncation/turns"], m["truncation/wall"], m["truncation/context"],
            m["truncation/other"]) == pytest.approx((1 / 7, 1 / 7, 1 / 7, 0.0, 1 / 7))
    assert compute_metrics(eps)["truncation/tokens"] == m["truncation/tokens"]
    chart = next(c for c in _metric_charts({1: m, 2: m}) if c["id"] == "truncation")
    assert {s["name"] for s in chart["series"]} == set(m)


def _history(shares: list[float], reason: str = "tokens") -> History:
    return History(metrics={s: {f"truncation/{reason}": v, "truncation/turns": 0.1}
                            for s, v in enumerate(shares)})


def test_an_alert_when_a_budget_cuts_more_and_more_episodes() -> None:
    cfg = MonitorConfig(window=2)
    eps = [_ep(0.0, BUDGET, "tokens"), _ep(1.0, 10)]
    alerts = DETECTORS["truncation_rising"](_history([0.05, 0.1, 0.4, 0.5]), 3, eps, cfg)
    assert [(a.key, a.detector) for a in alerts] == [("tokens", "truncation_rising")]
    assert "tokens budget" in alerts[0].message and alerts[0].episode_ids == [eps[0].episode_id]
    assert alerts[0].value == pytest.approx(0.375)
    assert DETECTORS["truncation_rising"](_history([0.3, 0.3, 0.32, 0.3]), 3, eps, cfg) == []
    assert DETECTORS["truncation_rising"](_history([0.5, 0.4, 0.1, 0.0]), 3, eps, cfg) == []


class _Recorder:
    """An updater that keeps the samples it was given."""

    def __init__(self) -> None:
        self.samples: list = []

    def step(self, samples: list, seed: int = 0) -> dict[str, float]:
        self.samples = samples
        return {}


@pytest.mark.parametrize("mode", ["score", "mask", "overlong"])
def test_the_update_learns_what_the_run_chose(mode: str) -> None:
    """`update_policy` (rlvr.train.loop) trains on the advantages of the run's choice; its metrics keep the
    verdicts' rewards."""
    from types import SimpleNamespace

    from rlvr.train.distributed import SINGLE
    from rlvr.train.loop import update_policy

    batch = [ep.model_copy(update={"token_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "logprobs": [0.0, -1, -1]})
             for ep in _batch()]
    updater = _Recorder()
    trainer = SimpleNamespace(cfg=load_config(None, []), dist=SINGLE, policy=SimpleNamespace(version=0),
                              updater=updater, truncation=Truncation(mode))
    metrics = update_policy(trainer, batch, 0)  # type: ignore[arg-type]
    want = _advantages(mode, batch)
    assert sorted(s.advantage for s in updater.samples) == pytest.approx(sorted(want.values()))
    assert metrics["reward/mean"] == pytest.approx(0.5)
    assert metrics[{"score": "truncation/scored", "mask": "truncation/masked",
                    "overlong": "truncation/overlong_penalty_mean"}[mode]] > 0
