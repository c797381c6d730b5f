"""Anomaly detectors on synthetic runs, each with its anomaly planted and without it."""
from __future__ import annotations

import pytest

from rlvr.config import MonitorConfig
from rlvr.monitor import DETECTORS, Monitor
from rlvr.monitor.detectors import History, mismatch_kl, mismatch_ratio, no_tool_calls, reward_without_heldout
from tests.monitor.agentic import agent_run
from tests.store.synthetic import PLANTS, run

PLANTED = {"flag_rate": "flag_rate_rising", "reward_without_heldout": "reward_without_heldout",
           "task_spike": "task_reward_spike", "length_blowup": "length_blowup",
           "entropy_collapse": "entropy_collapse", "zero_variance": "zero_variance_groups",
           "mismatch_kl": "mismatch_kl", "mismatch_ratio": "mismatch_ratio",
           "truncation": "truncation_rising"}


def _alerts(tmp_path, plant, seed=0, steps=12, **cfg):
    with Monitor(tmp_path, MonitorConfig(tensorboard=False, **cfg)) as mon:
        for step, eps, extra in run(steps=steps, plant=plant, seed=seed):
            mon.log(step, eps, extra)
    return mon.alerts


AGENTIC = {"no_tool_calls"}
"""Planted in multi-turn runs played through the real Env (tests.monitor.agentic), below."""


def test_every_detector_has_a_planted_case():
    assert set(PLANTED.values()) | AGENTIC == set(DETECTORS) and set(PLANTED) == set(PLANTS)


@pytest.mark.parametrize("steps", [6, 12])
@pytest.mark.parametrize("plant", PLANTS)
def test_planted_anomaly_is_detected_after_its_onset(tmp_path, plant, steps):
    alerts = [a for a in _alerts(tmp_path, plant, steps=steps) if a.detector == PLANTED[plant]]
    assert alerts, f"{plant} not detected"
    assert all(a.step >= steps // 2 for a in alerts)  # the anomaly starts at steps // 2


@pytest.mark.parametrize(("seed", "steps"), [(0, 12), (1, 12), (2, 6), (3, 20)])
def test_a_healthy_run_raises_nothing(tmp_path, seed, steps):
    assert _alerts(tmp_path, None, seed=seed, steps=steps) == []


def test_links_point_at_the_episodes_that_show_it(tmp_path):
    [spike] = [a for a in _alerts(tmp_path, "task_spike") if a.detector == "task_reward_spike"]
    assert spike.key == "t0" and len(spike.episode_ids) == 8
    [hack] = [a for a in _alerts(tmp_path / "b", "flag_rate") if a.detector == "flag_rate_rising"]
    assert hack.severity == "critical" and hack.episode_ids


def test_reward_rising_with_heldout_rising_is_healthy():
    cfg = MonitorConfig(window=2)
    h = History()
    for s in range(4):
        h.metrics[s] = {"reward/mean": 0.2 + 0.2 * s, "heldout/pass_rate": 0.2 + 0.2 * s}
    assert reward_without_heldout(h, 3, [], cfg) == []
    for s in range(4):
        h.metrics[s]["heldout/pass_rate"] = 0.3
    assert [a.detector for a in reward_without_heldout(h, 3, [], cfg)] == ["reward_without_heldout"]
    for s in range(4):
        del h.metrics[s]["heldout/pass_rate"]
    assert reward_without_heldout(h, 3, [], cfg) == []  # no held-out figures: no verdict either way


def test_thresholds_come_from_the_config(tmp_path):
    assert not [a for a in _alerts(tmp_path, "length_blowup", length_ratio=10.0)
                if a.detector == "length_blowup"]


def test_detectors_can_be_switched_off(tmp_path):
    assert _alerts(tmp_path, "flag_rate", detectors=False) == []


def _binary_run(tmp_path, spike_from: float | None, z: float = 4.0):
    """32 tasks x 8 binary samples for 20 steps at pass rate 0.35; optionally task t0 jumps from a low rate to
    1."""
    import random

    from rlvr.rollout.episode import Episode

    rng = random.Random(7)
    with Monitor(tmp_path, MonitorConfig(tensorboard=False, task_spike=0.4, task_spike_z=z)) as mon:
        for step in range(20):
            eps = []
            for t in range(32):
                p = (1.0 if step == 19 else spike_from) if (t == 0 and spike_from is not None) else 0.35
                eps += [Episode(step=step, task_id=f"t{t}", domain="code", group_id=f"{step}:{t}",
                                sample_index=s,
                                reward=float(rng.random() < p), status="done") for s in range(8)]
            mon.log(step, eps)
    return [a for a in mon.alerts if a.detector == "task_reward_spike"]


def test_binary_reward_noise_is_not_a_spike_but_a_real_jump_is(tmp_path):
    # 640 task-steps of 8 coin flips at 0.35 produce 7/8 and 8/8 groups by chance: judged by the size of the
    # jump alone they look like spikes; against the task's own noise, none may raise an alert.
    assert _binary_run(tmp_path / "naive", None, z=0.0)
    assert _binary_run(tmp_path / "noise", None) == []
    [spike] = _binary_run(tmp_path / "jump", 0.1)
    assert spike.key == "t0" and spike.step == 19


def _mismatch_history(values: list[dict[str, float]]) -> History:
    h = History()
    for s, m in enumerate(values):
        h.metrics[s] = m
    return h


def test_mismatch_needs_patience_and_takes_its_thresholds_from_the_config():
    cfg = MonitorConfig(patience=3)
    healthy = {"mismatch/kl": 1e-4, "mismatch/ratio_p5": 0.98, "mismatch/ratio_p95": 1.02}
    bad = {"mismatch/kl": 0.02, "mismatch/ratio_p5": 0.5, "mismatch/ratio_p95": 1.02}
    two = _mismatch_history([healthy, healthy, bad, bad])
    assert mismatch_kl(two, 3, [], cfg) == [] and mismatch_ratio(two, 3, [], cfg) == []  # 2 steps < patience
    three = _mismatch_history([healthy, bad, bad, bad])
    [kl] = mismatch_kl(three, 3, [], cfg)
    assert kl.value == 0.02 and kl.threshold == cfg.mismatch_kl and "decoupled" in kl.message
    [low] = mismatch_ratio(three, 3, [], cfg)  # the low tail only: p95 stayed inside the band
    assert low.key == "low" and low.value == 0.5 and low.threshold == cfg.mismatch_ratio_low
    lax = MonitorConfig(patience=3, mismatch_kl=0.05, mismatch_ratio_low=0.4)
    assert mismatch_kl(three, 3, [], lax) == [] and mismatch_ratio(three, 3, [], lax) == []
    # no mismatch figures at all (a run with nothing to train yet): nothing to judge
    assert mismatch_kl(History(), 0, [], cfg) == [] and mismatch_ratio(History(), 0, [], cfg) == []


def test_mismatch_alert_is_raised_once_per_onset(tmp_path):
    alerts = [a for a in _alerts(tmp_path, "mismatch_ratio", steps=12) if a.detector == "mismatch_ratio"]
    assert len(alerts) == 1 and alerts[0].key == "high" and alerts[0].step == 8  # onset 6, patience 3


def _agent_alerts(run_dir, pool, **kw):
    with Monitor(run_dir, MonitorConfig(tensorboard=False, patience=3)) as mon:
        for step, eps in agent_run(pool, **kw):
            mon.log(step, eps)
    return [a for a in mon.alerts if a.detector == "no_tool_calls"]


def test_no_tool_calls_fires_once_the_policy_stopped_using_its_tools(tmp_path, pool):
    import json

    [alert] = _agent_alerts(tmp_path, pool, steps=8, stop_at=4)
    assert alert.step == 6 and alert.value == 1.0 and alert.threshold == 1.0  # onset 4, patience 3
    assert len(alert.episode_ids) == 4 and "stopped using its tools" in alert.message
    recs = [json.loads(x) for x in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [r["detector"] for r in recs if r["detector"] == "no_tool_calls"] == ["no_tool_calls"]
    metrics = [json.loads(x)["metrics"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["agent/no_tool_call_share"] for m in metrics] == [0.0] * 4 + [1.0] * 4
    assert metrics[0]["agent/tool_calls_per_episode"] == 2


def test_no_tool_calls_is_quiet_while_tools_are_used_and_on_runs_without_them(tmp_path, pool):
    assert _agent_alerts(tmp_path / "healthy", pool, steps=6) == []
    # single-turn episodes never call a tool, and are no sign of a policy that stopped using them
    assert _agent_alerts(tmp_path / "single", pool, steps=6, single_turn=True) == []


def test_no_tool_calls_needs_patience_and_takes_its_threshold_from_the_config():
    cfg = MonitorConfig(patience=3)
    assert no_tool_calls(_mismatch_history([{"agent/no_tool_call_share": 0.0}, {}, {}]), 2, [], cfg) == []
    most = _mismatch_history([{"agent/no_tool_call_share": v} for v in (0.0, 0.75, 0.75, 0.75)])
    assert no_tool_calls(most, 3, [], cfg) == []
    [alert] = no_tool_calls(most, 3, [], MonitorConfig(patience=3, no_tool_call_share=0.75))
    assert alert.value == 0.75 and alert.threshold == 0.75
    two = _mismatch_history([{"agent/no_tool_call_share": v} for v in (0.0, 0.0, 1.0, 1.0)])
    assert no_tool_calls(two, 3, [], cfg) == []  # 2 steps < patience
    assert no_tool_calls(History(), 0, [], cfg) == []
