"""Metric sinks: TensorBoard (default), MLflow and Weights & Biases (lazily imported), and the JSONL
record."""
from __future__ import annotations

import importlib
import json
import math
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from rlvr.config import MonitorConfig
from rlvr.errors import UserError
from rlvr.store.layout import RunLayout


class Sink(Protocol):
    """Where metrics go: `write` one step's metrics, `close` at the end."""

    def write(self, step: int, metrics: dict[str, float]) -> None: ...
    def close(self) -> None: ...


def _import_optional(module: str, field: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"{field} is on but {module} is not installed", field=field,
                        fix=f"pip install {module}, or set {field} = false") from None


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def open_append(path: Path) -> Any:
    """Open a JSONL file for appending; a torn last line (a crash mid-write) is ended so it stays alone."""
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")
    return open(path, "a", encoding="utf-8")


class JsonlSink:
    """Appends each step's metrics to `<run_dir>/metrics.jsonl`, flushed per line (a crash loses at most
    one)."""

    def __init__(self, run_dir: Path) -> None:
        self._f = open_append(RunLayout(run_dir).metrics)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self._f.write(json.dumps({"step": step, "time": time.time(), "metrics": _finite(metrics)}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class TensorBoardSink:
    """TensorBoard event files under `<run_dir>/tensorboard` (tensorboardX: no torch needed)."""

    def __init__(self, run_dir: Path) -> None:
        from tensorboardX import SummaryWriter

        self._w = SummaryWriter(logdir=str(RunLayout(run_dir).tensorboard), flush_secs=30)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in _finite(metrics).items():
            self._w.add_scalar(k, v, global_step=step)

    def histogram(self, step: int, name: str, values: list[float]) -> None:
        if values:
            self._w.add_histogram(name, values, global_step=step)

    def close(self) -> None:
        self._w.flush()
        self._w.close()


class MLflowSink:
    """Logs to an MLflow run (experiment `monitor.mlflow_experiment`, named after the run directory)."""

    def __init__(self, run_dir: Path, cfg: MonitorConfig) -> None:
        self._m: Any = _import_optional("mlflow", "monitor.mlflow")
        if cfg.mlflow_tracking_uri:
            self._m.set_tracking_uri(cfg.mlflow_tracking_uri)
        self._m.set_experiment(cfg.mlflow_experiment)
        self._run = self._m.start_run(run_name=run_dir.name)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self._m.log_metrics(_finite(metrics), step=step)

    def close(self) -> None:
        self._m.end_run()


class WandbSink:
    """Logs to a Weights & Biases run (project `monitor.wandb_project`, files under the run directory)."""

    def __init__(self, run_dir: Path, cfg: MonitorConfig) -> None:
        self._wandb: Any = _import_optional("wandb", "monitor.wandb")
        self._run = self._wandb.init(project=cfg.wandb_project, name=run_dir.name, dir=str(run_dir),
                                     mode=cfg.wandb_mode)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(_finite(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


def make_sinks(run_dir: Path, cfg: MonitorConfig) -> list[Sink]:
    """The JSONL record always, then every sink the config turns on (a missing package is a UserError)."""
    optional: list[tuple[bool, Any]] = [
        (cfg.tensorboard, lambda: TensorBoardSink(run_dir)),
        (cfg.mlflow, lambda: MLflowSink(run_dir, cfg)),
        (cfg.wandb, lambda: WandbSink(run_dir, cfg)),
    ]
    sinks: list[Sink] = [JsonlSink(run_dir)]
    try:
        for enabled, factory in optional:
            if enabled:
                sinks.append(factory())
    except BaseException:
        for s in sinks:
            s.close()
        raise
    return sinks
