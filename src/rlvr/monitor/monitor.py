"""Monitor: per-step metrics to every configured sink, and anomaly detection into alerts.jsonl and the run
log."""
from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from typing_extensions import Self

from rlvr.config import MonitorConfig
from rlvr.monitor.detectors import Alert, History, detect
from rlvr.monitor.metrics import compute_metrics
from rlvr.monitor.sinks import TensorBoardSink, make_sinks, open_append
from rlvr.rollout.episode import Episode
from rlvr.store.layout import RunLayout

log = logging.getLogger("rlvr.monitor")


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSONL file, skipping a torn last line (a crash mid-append) and blank lines."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def read_metrics(path: Path) -> dict[int, dict[str, float]]:
    """Metrics per step from a metrics.jsonl; several lines of one step merge, later values winning."""
    out: dict[int, dict[str, float]] = {}
    for rec in read_jsonl(path):
        step, metrics = rec.get("step"), rec.get("metrics")
        if isinstance(step, int) and isinstance(metrics, dict):
            out.setdefault(step, {}).update(metrics)
    return out


class Monitor:
    """Sees a run: `log(step, episodes, extra)` once per step, `close()` at the end (or use it as a context).

    A resumed run reopens the same directory: earlier metrics are read back so trend detectors continue.
    """

    def __init__(self, run_dir: str | Path, config: MonitorConfig | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config = config or MonitorConfig()
        self.history = History()
        layout = RunLayout(self.run_dir)
        self.history.metrics = read_metrics(layout.metrics)
        self._active: set[tuple[str, str]] = set()
        self.alerts: list[Alert] = []
        self._sinks = make_sinks(self.run_dir, self.config)
        self._alerts_f = open_append(layout.alerts)
        self._closed = False

    def log(self, step: int, episodes: list[Episode], extra: dict[str, float] | None = None) -> dict[str,
                                                                                                     float]:
        """Compute this step's metrics, write them to every sink, run the detectors; returns the metrics."""
        if self._closed:
            raise RuntimeError("Monitor.log after close()")
        episodes = list(episodes)
        # A call with extras only (an eval step's held-out figures) adds to the step instead of replacing it.
        metrics = compute_metrics(episodes) if episodes else {}
        for k, v in (extra or {}).items():
            # The trainer's own figures (phase timings, entropy, batch-wide throughput) win over estimates.
            if isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(float(v)):
                metrics[k] = float(v)
        self.history.metrics.setdefault(step, {}).update(metrics)
        for sink in self._sinks:
            sink.write(step, metrics)
            if isinstance(sink, TensorBoardSink):
                sink.histogram(step, "reward/hist", [e.reward for e in episodes if not e.masked])
        if self.config.detectors:
            self._raise(step, detect(self.history, step, episodes, self.config), episodes)
        self._record_tasks(step, episodes)
        return metrics

    def _record_tasks(self, step: int, episodes: list[Episode]) -> None:
        by_task: dict[str, list[float]] = defaultdict(list)
        for e in episodes:
            if not e.masked:
                by_task[e.task_id].append(e.reward)
        for task, rewards in by_task.items():
            self.history.task_rewards[task].append((step, rewards))

    def _raise(self, step: int, alerts: list[Alert], episodes: list[Episode]) -> None:
        firing = {(a.detector, a.key) for a in alerts}
        # Detectors whose condition cleared may fire again at a later onset.
        self._active &= firing
        for a in alerts:
            if (a.detector, a.key) in self._active:
                continue
            self._active.add((a.detector, a.key))
            self.alerts.append(a)
            self._alerts_f.write(json.dumps(a.to_json()) + "\n")
            self._alerts_f.flush()
            level = logging.ERROR if a.severity == "critical" else logging.WARNING
            log.log(level, "step %d alert %s: %s", step, a.detector, a.message)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sink in self._sinks:
            sink.close()
        self._alerts_f.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
