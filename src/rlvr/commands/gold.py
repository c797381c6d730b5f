"""Gold trajectories of a run's tasks (`rlvr.rollout.policies.gold`) played through the run's env, pool and
Scorer: `rlvr tasks sft-data` writes them as a chat dataset, and the SFT warm start (`[sft] source = "gold"`)
trains on their token records."""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from rlvr import run
from rlvr.config import RunConfig
from rlvr.envs.tools import tools_for
from rlvr.errors import UserError
from rlvr.progress import Progress
from rlvr.rollout.episode import Episode
from rlvr.rollout.policies.gold import GoldPlan, plan_for, play
from rlvr.tasks.spec import Task

__all__ = ["gold_episodes", "tool_specs", "write_sft_data"]


def tool_specs(task: Task) -> list[dict[str, Any]]:
    """The OpenAI tool specs a task's episodes are offered (none for a single-turn task)."""
    return [t.spec() for t in tools_for(task).values()] if task.multi_turn else []


def gold_episodes(plans: Sequence[GoldPlan], cfg: RunConfig, *, encoder: Any = None, seed: int = 0,
                  built: run.Run | None = None, show_progress: bool = True) -> list[Episode]:
    """The plans played through the run's env (`built`, or a run built here without a policy); the episodes
    that pass, with the trained policy's tokens when `encoder` is given."""
    columns = (TextColumn("gold"), BarColumn(), MofNCompleteColumn(), TextColumn("trajectories"),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not show_progress,
                  unit="trajectories") as bar:
        job = bar.add_task("gold", total=len(plans))
        domains = {p.task.domain for p in plans}
        with contextlib.nullcontext(built) if built is not None else run.build(cfg, policy=False,
                                                                               domains=domains) as r:

            def gold(policy: Any) -> Any:
                return r.gold(policy, progress=lambda done, total: bar.update(job, completed=done))

            return play(plans, gold, encoder=encoder, seed=seed)


def write_sft_data(spec: str, out: Path, cfg: RunConfig, *, seed: int = 0,
                   show_progress: bool = True) -> tuple[int, int]:
    """Write the gold trajectories of a tasks SPEC as a chat SFT dataset (one conversation a line: `messages`
    and `tools`, the form TRL's SFTTrainer reads); returns (written, tasks). A domain without references is a
    UserError, and nothing is written."""
    from rlvr.store.exports import sft_record, write_jsonl

    tasks = run.tasks_of(spec, cfg, seed=seed)
    if not tasks:
        raise UserError(f"tasks spec {spec!r} selects no tasks", field="SPEC", fix="check the spec")
    plans = [plan_for(t) for t in tasks]
    episodes = gold_episodes(plans, cfg, seed=seed, show_progress=show_progress)
    by_key = {t.key: t for t in tasks}
    records = [sft_record(ep, tool_specs(by_key[f"{ep.domain}/{ep.task_id}"])) for ep in episodes]
    if not records:
        raise UserError(f"no gold trajectory of {spec!r} passed its verifier", field="SPEC",
                        fix="check the domain's references with `rlvr tasks validate --domain NAME`")
    write_jsonl(records, out)
    return len(records), len(tasks)
