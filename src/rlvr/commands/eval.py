"""`rlvr eval`: evaluate a policy on a tasks SPEC, k samples a task, into an eval report (`rlvr.monitor.evals`).

`run_eval` builds the run (`rlvr.run`: the tasks with the config's domain settings, the pool, the policy, the
Scorer), drives the rollout engine with a progress bar, hands each finished episode to an episode store as it
ends, and stops on Ctrl-C or a time limit with the report of the finished episodes, marked partial.
"""
from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rlvr import run
from rlvr.errors import UserError
from rlvr.monitor.evals import report
from rlvr.rollout.episode import Episode

__all__ = ["agent_runner", "eval_config", "mostly_masked", "run_eval"]

MOSTLY = 0.5
"""An eval whose masked share of episodes is above this failed for the infrastructure's fault (exit 1)."""


def mostly_masked(rep: dict[str, Any]) -> bool:
    """Whether most of an eval's episodes were masked by infra faults (nothing it says is about the policy)."""
    done = int(rep.get("episodes") or 0)
    return done > 0 and int(rep.get("masked_episodes") or 0) > MOSTLY * done


class _TimeUp(KeyboardInterrupt):
    """The eval's time limit ran out (raised on the driver's thread, like Ctrl-C)."""


class _Deadline:
    """Stops the run at `seconds`: checked as each episode ends, and on the main thread also by a SIGINT the
    timer sends itself, so a long generation or tool call is cut as well."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.expired = False
        self._timer: Any = None

    def __enter__(self) -> _Deadline:
        import os
        import signal
        import threading
        import time

        self.t_end = time.monotonic() + self.seconds if self.seconds is not None else None
        if self.seconds is not None and threading.current_thread() is threading.main_thread():
            def fire() -> None:
                self.expired = True
                os.kill(os.getpid(), signal.SIGINT)

            self._timer = threading.Timer(self.seconds, fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def check(self) -> None:
        import time

        if self.t_end is not None and time.monotonic() >= self.t_end:
            self.expired = True
            raise _TimeUp

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()


class _Recorder:
    """Keeps every finished episode and writes them to the eval's episode store in batches (nothing is lost on
    Ctrl-C: the caller flushes the rest)."""

    def __init__(self, store: Any, every: int = 64, every_s: float = 30.0) -> None:
        import time

        self.episodes: list[Episode] = []
        self.store = store
        self._pending: list[Episode] = []
        self._every, self._every_s, self._last = every, every_s, time.monotonic()

    def add(self, ep: Episode) -> None:
        import time

        self.episodes.append(ep)
        self._pending.append(ep)
        if len(self._pending) >= self._every or time.monotonic() - self._last >= self._every_s:
            self.flush()

    def flush(self) -> None:
        import time

        if self.store is not None and self._pending:
            self.store.write(0, self._pending)
        self._pending, self._last = [], time.monotonic()


def agent_runner(built: Any, sampling: Any, on_episode: Any, stack: ExitStack) -> Any:
    """`--agent`: the run's agents (`rlvr.rollout.agents.agent_runner`: a gateway in front of the run's policy
    and an isolated pool on the agent's interpreter, closed with `stack`)."""
    from rlvr.rollout.agents import agent_runner as runner

    return runner(built.cfg, built.policy, built.scorer, sampling, stack, on_episode=on_episode)


def eval_config(config_file: str | Path | None = None, *, temperature: float | None = None,
                top_p: float | None = None, max_new_tokens: int | None = None, max_turns: int | None = None,
                cluster: str | None = None) -> Any:
    """The RunConfig of an eval: a run config file's sections (`[policy]`, `[rollout]`, `[sandbox]`, ...) with
    the command line's sampling options over them, validated like any config (bad values name the field)."""
    from rlvr.config import load_config

    overrides = [f"{key}={value}" for key, value in (
        ("policy.temperature", temperature), ("policy.top_p", top_p), ("policy.max_new_tokens", max_new_tokens),
        ("rollout.max_turns", max_turns), ("cluster.address", json.dumps(cluster) if cluster else None))
        if value is not None]
    return load_config(config_file, overrides)


def run_eval(policy_spec: str | None, tasks_spec: str, *, k: int, seed: int = 0, cluster: str | None = None,
             config: Any = None, show_progress: bool = True, out_dir: str | Path | None = None,
             store: Any = None, time_limit_s: float | None = None, heldout: bool = False) -> dict[str, Any]:
    """Evaluate a policy on a tasks SPEC with k samples per task; returns the report.

    The policy is `policy_spec` (`hf:PATH`, ...) with the rest of `config.policy` (device, dtype, chat
    template, sampling), or `config.policy` itself when `policy_spec` is None. `out_dir` receives the resolved
    config; `store` (an rlvr.store EpisodeStore, or anything with its `write(step, episodes)`) every finished
    episode, under step 0 (the CLI keeps it in `<out_dir>/episodes/`, the training store's layout, so `rlvr
    report`, `rlvr query` and `rlvr failures` work on an eval directory). Ctrl-C or `time_limit_s` stops the
    run: the report then covers the finished episodes only and says so (`partial`, `stopped`).
    """
    import time

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from rlvr.config import RunConfig
    from rlvr.progress import Progress
    from rlvr.rollout.backends import parse_spec
    from rlvr.rollout.policy import SamplingParams

    if k < 1:
        raise UserError(f"-k must be at least 1, got {k}", field="-k", fix="e.g. -k 8")
    if time_limit_s is not None and time_limit_s <= 0:
        raise UserError(f"--time-limit must be above 0 seconds, got {time_limit_s}", field="--time-limit",
                        fix="e.g. --time-limit 600")
    cfg: RunConfig = config or RunConfig()
    if cluster:
        cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"address": cluster})})
    if policy_spec:
        backend, target = parse_spec(policy_spec)
        cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"backend": backend, "model": target})})
    # with the config's [tasks.domains] settings; `heldout`: the config's held-out set as training draws it
    # (procedural domains from tasks.heldout_offset on, finite ones sampled by the config's seed)
    tasks = run.heldout_tasks(cfg) if heldout else run.tasks_of(tasks_spec, cfg, seed=seed)
    if not tasks:
        raise UserError(f"tasks spec {tasks_spec!r} selects no tasks", field="--tasks", fix="check the spec")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:  # the resolved config, its records here (not at a [store] url of the file)
        cfg.model_copy(update={"store": cfg.store.model_copy(update={"url": None})}).write(out)
    if cfg.agent.command:  # an agent that cannot start is one line, before any model or sandbox starts
        from rlvr.rollout.agents import check_agent

        check_agent(cfg.agent)
    sampling = SamplingParams.from_config(cfg.policy)
    recorder = _Recorder(store)
    stopped: str | None = None
    total = len(tasks) * k
    t0 = time.perf_counter()
    columns = (TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes, {task.fields[passed]} "
               "passed"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    engine = None
    try:
        with run.build(cfg, seed=seed) as built, ExitStack() as stack, \
                Progress(*columns, console=Console(stderr=True), disable=not show_progress, unit="episodes") as bar:
            job = bar.add_task("eval", total=total, passed=0)
            deadline = _Deadline(time_limit_s)

            def finished(ep: Episode) -> None:
                recorder.add(ep)
                bar.update(job, completed=len(recorder.episodes),
                           passed=sum(e.passed for e in recorder.episodes if not e.masked))
                deadline.check()

            engine = agent_runner(built, sampling, finished, stack) if cfg.agent.command else \
                built.engine(sampling=sampling, on_episode=finished)
            try:  # a SIGINT the deadline sent just as the run ended still lands in here
                with deadline:
                    engine.run(tasks, k, step=0, seed=seed)
            except KeyboardInterrupt:
                if len(recorder.episodes) < total:
                    stopped = "time limit" if deadline.expired else "interrupted"
    finally:
        recorder.flush()
    extra = {"wall_s": time.perf_counter() - t0,
             "policy_idle_fraction": engine.stats.idle_fraction if engine is not None else 0.0,
             "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p,
                          "max_new_tokens": sampling.max_new_tokens, "max_turns": cfg.rollout.max_turns},
             "planned_episodes": total, "partial": stopped is not None, "stopped": stopped,
             "time_limit_s": time_limit_s, "store": getattr(store, "url", None)}
    return report(recorder.episodes, k=k, seed=seed, policy=policy_spec or f"{cfg.policy.backend}:{cfg.policy.model}",
                  tasks=tasks_spec, extra=extra)


