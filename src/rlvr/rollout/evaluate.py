"""Evaluation: pass@1 and pass@k per domain with bootstrap confidence intervals, and comparisons of two runs.

Every policy evaluated with the same tasks SPEC and seed sees the same tasks, initial states and per-episode
sampling seeds, so two checkpoints or two models are compared on identical work. pass@k is the unbiased
estimator of Chen et al. (2021) from n samples with c passes: 1 - C(n-c, k) / C(n, k), averaged over tasks.
Episodes masked by an infra fault do not count as samples. Intervals are 95% percentile bootstraps over tasks;
a comparison resamples the tasks both runs share, paired.

`run_eval` drives the rollout engine with a progress bar, hands each finished episode to an episode store as
it ends, and stops on Ctrl-C or a time limit with the report of the finished episodes, marked partial.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.errors import UserError
from rlvr.rollout.episode import Episode

EVAL_SCHEMA_VERSION = 1
BOOTSTRAP_ROUNDS = 2000
EVAL_FILE = "eval.json"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (numerically stable product form)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def bootstrap_ci(values: Sequence[float], *, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (resampled with replacement)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return (float("nan"), float("nan"))
    if arr.size == 1 or np.all(arr == arr[0]):
        return (float(arr[0]), float(arr[0]))
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(rounds, arr.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


def task_counts(episodes: Sequence[Episode]) -> dict[str, dict[str, list[int]]]:
    """domain -> task id -> [samples, passes], infra-masked episodes left out."""
    out: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for ep in episodes:
        row = out[ep.domain].setdefault(ep.task_id, [0, 0])
        if ep.masked:
            continue
        row[0] += 1
        row[1] += int(ep.passed)
    return dict(out)


def summarize(counts: dict[str, dict[str, list[int]]], k: int, *, seed: int = 0,
              masked: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """Per-domain n (tasks judged), samples, pass@1, pass@k and their intervals."""
    result: dict[str, dict[str, Any]] = {}
    for domain, tasks in sorted(counts.items()):
        judged = [(n, c) for n, c in tasks.values() if n > 0]
        p1 = [c / n for n, c in judged]
        pk = [pass_at_k(n, c, k) for n, c in judged if n >= k]
        result[domain] = {
            "n": len(judged), "samples": sum(n for n, _ in judged), "k": k,
            "pass@1": float(np.mean(p1)) if p1 else None, "pass@1_ci": list(bootstrap_ci(p1, seed=seed)) if p1 else None,
            "pass@k": float(np.mean(pk)) if pk else None, "pass@k_ci": list(bootstrap_ci(pk, seed=seed)) if pk else None,
            "tasks_short_of_k": len(judged) - len(pk), "unjudged_tasks": len(tasks) - len(judged),
            "masked_episodes": (masked or {}).get(domain, 0),
        }
    return result


def report(episodes: Sequence[Episode], *, k: int, seed: int, policy: str, tasks: str,
           extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The eval report: one JSON-ready object whose `domains` maps each domain to its figures."""
    counts = task_counts(episodes)
    masked: dict[str, int] = defaultdict(int)
    for ep in episodes:
        masked[ep.domain] += int(ep.masked)
    return {"schema_version": EVAL_SCHEMA_VERSION, "policy": policy, "tasks": tasks, "k": k, "seed": seed,
            "episodes": len(episodes), "domains": summarize(counts, k, seed=seed, masked=masked),
            "per_task": counts, **(extra or {})}


def load_report(path: str | Path) -> dict[str, Any]:
    """An eval report from `eval.json` or a directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / EVAL_FILE
    if not p.is_file():
        raise UserError("no eval report here", file=p, fix=f"give an {EVAL_FILE} written by `rlvr eval` or its directory")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"not a JSON eval report ({exc})", file=p, fix="give an eval.json written by `rlvr eval`") from None
    if not isinstance(data, dict) or not isinstance(data.get("domains"), dict):
        raise UserError("not an eval report (no `domains` object)", file=p, fix="give an eval.json written by `rlvr eval`")
    return data


def _paired(a: dict[str, list[int]], b: dict[str, list[int]], k: int, fn: Callable[[int, int], float]
            ) -> tuple[float | None, list[float] | None, int]:
    shared = [t for t in a if t in b and a[t][0] >= k and b[t][0] >= k]
    if not shared:
        return None, None, 0
    diffs = [fn(*b[t]) - fn(*a[t]) for t in shared]
    return float(np.mean(diffs)), list(bootstrap_ci(diffs)), len(shared)


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """B minus A per domain: pass@1 and pass@k differences with paired intervals over shared tasks."""
    k = min(int(a.get("k", 1)), int(b.get("k", 1)))
    out: dict[str, Any] = {"k": k, "domains": {}}
    for domain in sorted(set(a["domains"]) | set(b["domains"])):
        ta = (a.get("per_task") or {}).get(domain, {})
        tb = (b.get("per_task") or {}).get(domain, {})
        d1, ci1, shared = _paired(ta, tb, 1, lambda n, c: c / n)
        dk, cik, _ = _paired(ta, tb, k, lambda n, c: pass_at_k(n, c, k))
        ra, rb = a["domains"].get(domain, {}), b["domains"].get(domain, {})
        out["domains"][domain] = {
            "a_pass@1": ra.get("pass@1"), "b_pass@1": rb.get("pass@1"), "delta_pass@1": d1, "delta_pass@1_ci": ci1,
            "a_pass@k": ra.get("pass@k"), "b_pass@k": rb.get("pass@k"), "delta_pass@k": dk, "delta_pass@k_ci": cik,
            "shared_tasks": shared,
        }
    return out


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
             store: Any = None, time_limit_s: float | None = None) -> dict[str, Any]:
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
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from rlvr.config import RunConfig
    from rlvr.rollout.backends import make_policy, parse_spec
    from rlvr.rollout.engine import RolloutEngine
    from rlvr.rollout.policy import SamplingParams
    from rlvr.scale import pool_for
    from rlvr.tasks.selection import resolve
    from rlvr.verify.scorer import Scorer

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
    tasks = resolve(tasks_spec, seed=seed)
    if not tasks:
        raise UserError(f"tasks spec {tasks_spec!r} selects no tasks", field="--tasks", fix="check the spec")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:  # the resolved config, its records here (not at a [store] url of the file)
        cfg.model_copy(update={"store": cfg.store.model_copy(update={"url": None})}).write(out)
    policy = make_policy(cfg.policy, seed=seed)
    sampling = SamplingParams.from_config(cfg.policy)
    recorder = _Recorder(store)
    stopped: str | None = None
    total = len(tasks) * k
    pool = pool_for(cfg)
    t0 = time.perf_counter()
    columns = (TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes, {task.fields[passed]} "
               "passed"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    engine = None
    try:
        with Progress(*columns, console=Console(stderr=True), disable=not show_progress) as bar:
            job = bar.add_task("episodes", total=total, passed=0)
            deadline = _Deadline(time_limit_s)

            def finished(ep: Episode) -> None:
                recorder.add(ep)
                bar.update(job, completed=len(recorder.episodes),
                           passed=sum(e.passed for e in recorder.episodes if not e.masked))
                deadline.check()

            engine = RolloutEngine(policy, pool, Scorer.from_config(cfg, pool), config=cfg.rollout, sampling=sampling,
                                   on_episode=finished)
            try:  # a SIGINT the deadline sent just as the run ended still lands in here
                with deadline:
                    engine.run(tasks, k, step=0, seed=seed)
            except KeyboardInterrupt:
                if len(recorder.episodes) < total:
                    stopped = "time limit" if deadline.expired else "interrupted"
    finally:
        recorder.flush()
        pool.close()
    extra = {"wall_s": time.perf_counter() - t0,
             "policy_idle_fraction": engine.stats.idle_fraction if engine is not None else 0.0,
             "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p,
                          "max_new_tokens": sampling.max_new_tokens, "max_turns": cfg.rollout.max_turns},
             "planned_episodes": total, "partial": stopped is not None, "stopped": stopped,
             "time_limit_s": time_limit_s, "store": getattr(store, "url", None)}
    return report(recorder.episodes, k=k, seed=seed, policy=policy_spec or f"{cfg.policy.backend}:{cfg.policy.model}",
                  tasks=tasks_spec, extra=extra)


def new_eval_dir(root: str | Path = "runs/eval") -> Path:
    """A fresh directory `<root>/<UTC time>[-n]` for one eval."""
    import time

    base = Path(root) / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run_dir, n = base, 1
    while True:
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            n += 1
            run_dir = base.with_name(f"{base.name}-{n}")


def write_report(rep: dict[str, Any], root: str | Path = "runs/eval", *, run_dir: str | Path | None = None) -> Path:
    """Write a report to `<run_dir>/eval.json` (default: a fresh `<root>/<UTC time>/`), atomically."""
    target = Path(run_dir) if run_dir is not None else new_eval_dir(root)
    target.mkdir(parents=True, exist_ok=True)
    path = target / EVAL_FILE
    tmp = path.with_name(f".{EVAL_FILE}.tmp")
    tmp.write_text(json.dumps(rep, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
