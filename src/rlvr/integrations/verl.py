"""rlvr's single-turn domains for verl: a dataset in verl's columns and the reward function verl calls.

    rlvr tasks export --tasks math:500 --format verl -o train.parquet
    python -m verl.trainer.main_ppo data.train_files=train.parquet \\
        reward.custom_reward_function.path=$(python -c "import rlvr.integrations.verl as m;
        print(m.__file__)") \\ reward.custom_reward_function.name=compute_score ...

verl reads `prompt` (chat messages), `data_source`, `ability`, `reward_model` ({style, ground_truth}) and
`extra_info` from each row, and calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`
with the decoded response. Each row's `extra_info` carries the task ref (`rlvr_task`, the key) and how to
rebuild it (`rlvr_spec` and `rlvr_select`: seed, domain settings, sample size), so the reward worker rebuilds
the task, hidden material included, from rlvr itself: the dataset holds no hidden tests. The verdict comes
from the same Scorer as everywhere else (one per rebuilt task set, per process); `score` is the reward, `acc`
the pass bit.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.atomic import atomic_path
from rlvr.errors import UserError
from rlvr.integrations.session import Runtime, TaskInput, resolve_tasks
from rlvr.tasks.spec import Task

DATA_SOURCE_PREFIX = "rlvr/"
"""`data_source` of every exported row: `rlvr/<domain>`."""

FORMATS = ("verl",)

_runtimes: dict[tuple[str, str], Runtime] = {}
_registered: dict[str, Task] = {}
_lock = threading.Lock()


def register_tasks(tasks: list[Task]) -> None:
    """Make tasks known to `compute_score` in this process (for rows exported from a list rather than a
    SPEC)."""
    with _lock:
        _registered.update({t.key: t for t in tasks})


def rows(tasks: TaskInput, *, seed: int = 0, settings: Mapping[str, Mapping[str, Any]] | None = None,
         split: str = "train", **select: Any) -> list[dict[str, Any]]:
    """verl's dataset rows for single-turn tasks (multi-turn ones are refused)."""
    resolved = resolve_tasks(tasks, seed=seed, settings=settings, **select)
    spec = tasks if isinstance(tasks, str) else ""
    how = json.dumps({"seed": seed, "settings": dict(settings or {}), **select}, sort_keys=True)
    if not spec:
        register_tasks(resolved)
    out = []
    for i, task in enumerate(resolved):
        if task.multi_turn:
            raise UserError(f"task {task.key} is multi-turn", field="tasks",
                            fix="verl's reward function scores one response: export single-turn domains")
        out.append({"data_source": DATA_SOURCE_PREFIX + task.domain,
                    "prompt": [{"role": "user", "content": task.prompt}],
                    "ability": task.domain,
                    "reward_model": {"style": "rule", "ground_truth": task.answer or ""},
                    "extra_info": {"split": split, "index": i, "rlvr_task": task.key, "rlvr_spec": spec,
                                   "rlvr_select": how}})
    return out


def export(tasks: TaskInput, path: str | Path, *, fmt: str = "verl", seed: int = 0, **select: Any) -> int:
    """Write `tasks` as a verl Parquet dataset at `path` (atomically); the number of rows."""

    import pyarrow as pa
    import pyarrow.parquet as pq

    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}", field="--format", fix=f"use one of {', '.join(FORMATS)}")
    table = pa.Table.from_pylist(rows(tasks, seed=seed, **select))
    p = Path(path)
    if not p.parent.is_dir():
        raise UserError("no such directory", file=p.parent, fix="create it first")
    with atomic_path(p) as tmp:
        pq.write_table(table, tmp)
    return table.num_rows


def _task_of(extra_info: Mapping[str, Any]) -> tuple[Runtime, Task]:
    key = extra_info.get("rlvr_task")
    if not key:
        raise UserError("extra_info has no rlvr_task", field="extra_info.rlvr_task",
                        fix="export the dataset with `rlvr tasks export --format verl`")
    spec = str(extra_info.get("rlvr_spec") or "")
    how = str(extra_info.get("rlvr_select") or "{}")
    with _lock:
        if not spec:
            task = _registered.get(key)
            if task is None:
                raise UserError(f"task {key!r} was exported from a list, not a SPEC, in another process",
                                field="extra_info.rlvr_spec", fix="export from a tasks SPEC, or call "
                                "register_tasks(tasks) in the reward worker")
            if ("", key) not in _runtimes:
                _runtimes[("", key)] = Runtime([task])
            return _runtimes[("", key)], task
    select = json.loads(how)
    runtime = Runtime.shared(spec, **{**select, "settings": select.get("settings") or None})
    return runtime, runtime.task(key)


def compute_score(data_source: str, solution_str: str, ground_truth: Any = None,
                  extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, float]:
    """verl's reward function: rlvr's verdict on `solution_str` for the row's task.

    Returns `score` (the reward: the verdict's score, or the flag penalty when flagged), `acc` (1.0 when it
    passed), `flagged` and `infra_error` (1.0 when the verifier could not judge; the score is then 0: verl has
    no way to mask a sample). `ground_truth` is not used: the task's own verifier holds the truth.
    """
    if not str(data_source).startswith(DATA_SOURCE_PREFIX):
        raise UserError(f"data_source {data_source!r} is not an rlvr dataset", field="data_source",
                        fix="route other data sources to verl's default_compute_score")
    runtime, task = _task_of(extra_info or {})
    scored = runtime.score_answer(task, solution_str or "")
    return {"score": float(scored.reward), "acc": float(scored.verdict.passed),
            "flagged": float(bool(scored.verdict.flags)),
            "infra_error": float(scored.infra_error is not None)}
