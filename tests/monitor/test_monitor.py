"""Monitor: metrics to the JSONL record and TensorBoard, alerts to alerts.jsonl and the run log, optional
sinks."""
from __future__ import annotations

import json
import logging
import sys
import types

import pytest

from rlvr.config import MonitorConfig
from rlvr.errors import UserError
from rlvr.monitor import Monitor
from tests.store.synthetic import episode, run


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_metrics_reach_jsonl_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with Monitor(tmp_path, MonitorConfig()) as mon:
        for step, eps, extra in run(steps=3):
            metrics = mon.log(step, eps, extra)
    assert metrics["time/rollout"] == extra["time/rollout"] and "pass_rate/code" in metrics
    recs = _lines(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in recs] == [0, 1, 2] and recs[2]["metrics"] == metrics
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("reward/mean", "pass_rate/code", "flags/rate", "infra/rate", "episode/length",
                "sandbox/p50_ms",
                "policy/tokens_per_s", "policy/idle_fraction", "time/rollout", "policy/entropy"):
        assert tag in tags, tag
    assert [e.step for e in acc.Scalars("reward/mean")] == [0, 1, 2]
    assert acc.Scalars("policy/entropy")[-1].value == pytest.approx(extra["policy/entropy"])


def test_non_finite_and_non_numeric_extras_are_dropped(tmp_path):
    with Monitor(tmp_path, MonitorConfig(tensorboard=False)) as mon:
        extra = {"a": float("nan"), "b": float("inf"), "c": "x", "d": 2}
        m = mon.log(0, [episode(0, "t")], extra)  # type: ignore[arg-type]
    assert "a" not in m and "b" not in m and "c" not in m and m["d"] == 2.0


def test_alerts_go_to_the_file_and_the_run_log_once_per_onset(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rlvr.monitor")
    with Monitor(tmp_path, MonitorConfig(tensorboard=False, patience=2)) as mon:
        for step, eps, extra in run(plant="entropy_collapse"):
            mon.log(step, eps, extra)
        # The condition held from step 7 on: one alert, not one per step.
        assert [a.detector for a in mon.alerts] == ["entropy_collapse"]
        # It clears, then collapses again: a second onset is a second alert.
        mon.log(20, [episode(20, "t")], {"policy/entropy": 2.0})
        mon.log(21, [episode(21, "t")], {"policy/entropy": 0.01})
        mon.log(22, [episode(22, "t")], {"policy/entropy": 0.01})
    recs = _lines(tmp_path / "alerts.jsonl")
    assert [(r["detector"], r["step"]) for r in recs] == [("entropy_collapse", 7), ("entropy_collapse", 22)]
    assert sum("entropy_collapse" in r.getMessage() for r in caplog.records) == 2


def test_a_resumed_run_continues_its_history(tmp_path):
    steps = list(run(plant="flag_rate"))
    with Monitor(tmp_path, MonitorConfig(tensorboard=False)) as mon:
        for step, eps, extra in steps[:8]:
            mon.log(step, eps, extra)
    (tmp_path / "metrics.jsonl").open("a").write('{"step": 8, "metr')  # a torn last line from a crash
    with Monitor(tmp_path, MonitorConfig(tensorboard=False)) as mon:
        assert sorted(mon.history.metrics) == list(range(8))
        for step, eps, extra in steps[8:]:
            mon.log(step, eps, extra)
    assert "flag_rate_rising" in {r["detector"] for r in _lines(tmp_path / "alerts.jsonl")}
    with Monitor(tmp_path, MonitorConfig(tensorboard=False)) as mon:
        assert sorted(mon.history.metrics) == list(range(12))


def test_log_after_close_is_an_error(tmp_path):
    mon = Monitor(tmp_path, MonitorConfig(tensorboard=False))
    mon.close()
    mon.close()
    with pytest.raises(RuntimeError):
        mon.log(0, [])


@pytest.mark.parametrize(("field", "module"), [("mlflow", "mlflow"), ("wandb", "wandb")])
def test_enabled_sink_without_its_package_is_a_user_error(tmp_path, monkeypatch, field, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(UserError, match=f"monitor.{field} is on but {module} is not installed"):
        Monitor(tmp_path, MonitorConfig(tensorboard=False, **{field: True}))


def test_mlflow_and_wandb_receive_the_metrics(tmp_path, monkeypatch):
    calls: list[tuple] = []
    mlflow = types.SimpleNamespace(
        set_tracking_uri=lambda uri: calls.append(("uri", uri)),
        set_experiment=lambda name: calls.append(("experiment", name)),
        start_run=lambda run_name: calls.append(("start", run_name)),
        log_metrics=lambda metrics, step: calls.append(("mlflow", step, metrics["reward/mean"])),
        end_run=lambda: calls.append(("end",)))
    wb_run = types.SimpleNamespace(log=lambda metrics,
                                   step: calls.append(("wandb", step, metrics["reward/mean"])),
                                   finish=lambda: calls.append(("finish",)))
    wandb = types.SimpleNamespace(init=lambda **kw: calls.append(("init", kw["project"], kw["mode"]))
                                  or wb_run)
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    cfg = MonitorConfig(tensorboard=False, mlflow=True, wandb=True, mlflow_tracking_uri="file:///x",
                        wandb_mode="offline")
    with Monitor(tmp_path / "myrun", cfg) as mon:
        mon.log(3, [episode(3, "t", reward=0.5, passed=False)])
    assert calls == [("uri", "file:///x"), ("experiment", "rlvr"), ("start", "myrun"),
                     ("init", "rlvr", "offline"),
                     ("mlflow", 3, 0.5), ("wandb", 3, 0.5), ("end",), ("finish",)]


def test_an_extras_only_call_adds_to_its_step(tmp_path):
    from rlvr.monitor.monitor import read_metrics

    with Monitor(tmp_path, MonitorConfig(tensorboard=False)) as mon:
        train = mon.log(3, [episode(3, "t", reward=1.0)])
        assert mon.log(3, [], {"heldout/pass_rate": 0.5}) == {"heldout/pass_rate": 0.5}
        assert mon.history.metrics[3] == {**train, "heldout/pass_rate": 0.5}
    assert read_metrics(tmp_path / "metrics.jsonl") == {3: {**train, "heldout/pass_rate": 0.5}}
