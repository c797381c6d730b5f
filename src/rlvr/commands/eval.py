"""`rlvr eval`: evaluate a policy on a tasks SPEC, k samples a task, into an eval report
(`rlvr.monitor.evals`); `eval_command` is the command itself, `run_eval` its engine room.

`run_eval` builds the run (`rlvr.run`: the tasks with the config's domain settings, the pool, the policy, the
Scorer), drives the run's rollouts with a progress bar, hands each finished episode to an episode store as it
ends, and stops on Ctrl-C or a time limit with the report of the finished episodes, marked partial.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rlvr import run
from rlvr.commands.console import err, out, print_json
from rlvr.errors import UserError
from rlvr.monitor.evals import report
from rlvr.rollout.episode import Episode

__all__ = ["eval_command", "eval_config", "mostly_masked", "run_eval"]

MOSTLY = 0.5
"""An eval whose masked share of episodes is above this failed for the infrastructure's fault (exit 1)."""


def mostly_masked(rep: dict[str, Any]) -> bool:
    """Whether most of an eval's episodes were masked by infra faults (nothing it says is about the
    policy)."""
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


def eval_config(config_file: str | Path | None = None, *, temperature: float | None = None,
                top_p: float | None = None, max_new_tokens: int | None = None, max_turns: int | None = None,
                cluster: str | None = None) -> Any:
    """The RunConfig of an eval: a run config file's sections (`[policy]`, `[rollout]`, `[sandbox]`, ...) with
    the command line's sampling options over them, validated like any config (bad values name the field)."""
    from rlvr.config import load_config

    overrides = [f"{key}={value}" for key, value in (
        ("policy.temperature", temperature), ("policy.top_p", top_p),
        ("policy.max_new_tokens", max_new_tokens),
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
    from rlvr.rollout.policy import SamplingParams

    if k < 1:
        raise UserError(f"-k must be at least 1, got {k}", field="-k", fix="e.g. -k 8")
    if time_limit_s is not None and time_limit_s <= 0:
        raise UserError(f"--time-limit must be above 0 seconds, got {time_limit_s}", field="--time-limit",
                        fix="e.g. --time-limit 600")
    cfg: RunConfig = config or RunConfig()
    if cluster:
        cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"address": cluster})})
    cfg = run.with_policy(cfg, policy_spec)
    # with the config's [tasks.domains] settings; `heldout`: the config's held-out set as training draws it
    # (procedural domains from tasks.heldout_offset on, finite ones sampled by the config's seed)
    tasks = run.heldout_tasks(cfg) if heldout else run.tasks_of(tasks_spec, cfg, seed=seed)
    if not tasks:
        raise UserError(f"tasks spec {tasks_spec!r} selects no tasks", field="--tasks", fix="check the spec")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:  # the resolved config, its records here (not at a [store] url of the file)
        cfg.model_copy(update={"store": cfg.store.model_copy(update={"url": None})}).write(out)
    if cfg.agent.command:  # an agent that cannot start is one line, before any model or sandbox starts
        from rlvr.rollout.gateway.agents import check_agent

        check_agent(cfg.agent)
    sampling = SamplingParams.from_config(cfg.policy)
    recorder = _Recorder(store)
    stopped: str | None = None
    total = len(tasks) * k
    t0 = time.perf_counter()
    columns = (TextColumn("eval"), BarColumn(), MofNCompleteColumn(),
               TextColumn("episodes, {task.fields[passed]} "
               "passed"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    rollouts = None
    bar = Progress(*columns, console=Console(stderr=True), disable=not show_progress, unit="episodes")
    job = bar.add_task("eval", total=total, passed=0)
    deadline = _Deadline(time_limit_s)

    def finished(ep: Episode) -> None:
        recorder.add(ep)
        bar.update(job, completed=len(recorder.episodes),
                   passed=sum(e.passed for e in recorder.episodes if not e.masked))
        deadline.check()

    try:
        with run.build(cfg, seed=seed, on_episode=finished, domains={t.domain for t in tasks}) as built, bar:
            rollouts = built.rollouts
            assert rollouts is not None  # built with a policy
            try:  # a SIGINT the deadline sent just as the run ended still lands in here
                with deadline:
                    rollouts.run(tasks, k, step=0, seed=seed)
            except KeyboardInterrupt:
                if len(recorder.episodes) < total:
                    stopped = "time limit" if deadline.expired else "interrupted"
    finally:
        recorder.flush()
    extra = {"wall_s": time.perf_counter() - t0,
             "policy_idle_fraction": rollouts.stats.idle_fraction if rollouts is not None else 0.0,
             "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p,
                          "max_new_tokens": sampling.max_new_tokens, "max_turns": cfg.rollout.max_turns},
             "planned_episodes": total, "partial": stopped is not None, "stopped": stopped,
             "time_limit_s": time_limit_s, "store": getattr(store, "url", None)}
    return report(recorder.episodes, k=k, seed=seed,
                  policy=policy_spec or f"{cfg.policy.backend}:{cfg.policy.model}",
                  tasks=tasks_spec, extra=extra)


def eval_command(
    ctx: typer.Context,
    policy: Annotated[str | None,
                      typer.Option(help="hf:PATH_OR_NAME, openai:BASE_URL#MODEL, scripted:FILE or vllm:PATH; "
                                        "default: the config's policy section.")] = None,
    tasks: Annotated[str | None,
                     typer.Option(help="Tasks SPEC: domains or pack paths with optional :N, comma-joined; "
                                       "default: the config's tasks.heldout.")] = None,
    k: Annotated[int, typer.Option("-k", help="Samples per task for pass@k.")] = 1,
    json_out: Annotated[bool,
                        typer.Option("--json", help="Print one JSON object (the progress bar stays "
                                                    "on stderr).")] = False,
    compare: Annotated[list[str] | None,
                       typer.Option(help="Compare two eval runs: --compare A B (each an eval.json or its "
                                         "directory).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of task sampling and generation.")] = 0,
    cluster: Annotated[str | None, typer.Option(help="Ray address; default local.")] = None,
    config: Annotated[Path | None,
                      typer.Option("--config",
                                   help="A run config TOML: its [tasks.domains], [policy], [rollout], "
                                        "[sandbox] and [cluster] sections apply (and its tasks.heldout "
                                        "without --tasks).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (0: greedy); default "
                                                           "policy.temperature.")] = None,
    top_p: Annotated[float | None,
                     typer.Option("--top-p", help="Nucleus mass; default policy.top_p.")] = None,
    max_new_tokens: Annotated[int | None,
                              typer.Option("--max-new-tokens", help="Tokens per model turn; default "
                                                                    "policy.max_new_tokens.")] = None,
    max_turns: Annotated[int | None,
                         typer.Option("--max-turns",
                                      help="Turns per episode (default: each task's own).")] = None,
    time_limit: Annotated[float | None,
                          typer.Option("--time-limit",
                                       help="Stop after S seconds and report the finished episodes.")] = None,
    output_dir: Annotated[Path,
                          typer.Option("--output-dir", help="Parent of the eval's directory "
                                                            "(<dir>/<UTC time>).")] = Path("runs/eval"),
    agent: Annotated[str | None,
                     typer.Option("--agent", help="Shell command of your own agent, or a harness preset "
                                                  "(claude-code, codex, openai-agents, mini-swe-agent, "
                                                  "smolagents, smolagents-code): it runs in each episode's "
                                                  "sandbox and calls the policy through OPENAI_BASE_URL or "
                                                  "ANTHROPIC_BASE_URL ([agent] command).")] = None,
    agent_dir: Annotated[Path | None,
                         typer.Option("--agent-dir",
                                      help="The agent's files, read-only in the sandbox as $RLVR_AGENT_DIR; "
                                           "default the current directory.")] = None,
    agent_python: Annotated[Path | None,
                            typer.Option("--agent-python",
                                         help="Interpreter or venv with the agent's packages (the openai "
                                              "SDK, a framework); default rlvr's.")] = None,
) -> None:
    """Evaluate a policy: pass@1 and pass@k per domain with confidence intervals.

    With --agent, your agent is the policy's driver: it runs in each episode's sandbox, calls the gateway in
    front of the policy, and its final workspace (and stdout, for answer tasks) is judged.

    Episodes are kept in the eval directory (rlvr report / query / failures work on it).

    Ctrl-C or --time-limit writes the partial report of the finished episodes.
    """
    from rlvr.monitor.evals import compare as compare_reports
    from rlvr.monitor.evals import load_report, new_eval_dir, write_report

    def pct(x: float | None, ci: list[float] | None = None) -> str:
        if x is None:
            return "-"
        return f"{100 * x:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")

    extra = list(ctx.args)
    if extra and not compare:
        raise UserError(f"unexpected argument {extra[0]!r}", fix="see rlvr eval --help")
    if compare:
        compare = [*compare, *extra]  # `--compare A B` as well as `--compare A --compare B`
        if len(compare) != 2:
            raise UserError(f"--compare takes two eval runs, got {len(compare)}", field="--compare",
                            fix="write --compare RUN_A --compare RUN_B")
        diff = compare_reports(load_report(compare[0]), load_report(compare[1]))
        if json_out:
            print_json(diff)
            return
        delta_k = [f"B-A pass@{diff['k']} [95% CI]"] if diff["k"] > 1 else []
        table = Table("domain", "A pass@1", "B pass@1", "B-A pass@1 [95% CI]", *delta_k, "tasks")
        for d, r in diff["domains"].items():
            table.add_row(d, pct(r["a_pass@1"]), pct(r["b_pass@1"]),
                          pct(r["delta_pass@1"], r["delta_pass@1_ci"]),
                          *([pct(r["delta_pass@k"], r["delta_pass@k_ci"])] if delta_k else []),
                          str(r["shared_tasks"]))
        out.print(table)
        loops = {d: r["loop"] for d, r in diff["domains"].items() if r.get("loop")}
        if loops:
            table = Table("domain (the loop)", "B-A episode passed", "B-A first attempt", "B-A recovery rate",
                          "attempts A -> B")
            for d, r in loops.items():
                table.add_row(d, *(pct(r.get(f"delta_{n}"), r.get(f"delta_{n}_ci"))
                                   for n in ("pass_rate", "first_attempt_pass", "recovery_rate")),
                              f"{r.get('a_attempts') or 0:.2f} -> {r.get('b_attempts') or 0:.2f}")
            out.print(table)
        return
    cfg = eval_config(config, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                      max_turns=max_turns, cluster=cluster)
    agent_options = {k: v for k, v in (("command", agent), ("dir", str(agent_dir) if agent_dir else None),
                                       ("python", str(agent_python) if agent_python else None))
                                       if v is not None}
    if agent_options:
        cfg = cfg.model_copy(update={"agent": cfg.agent.model_copy(update=agent_options)})
    # the config's held-out set, exactly as its training measures it
    heldout = not tasks and config is not None
    tasks = tasks or (run.heldout_spec(cfg) if heldout else None)
    if not tasks or not (policy or config is not None):
        raise UserError("give --policy and --tasks, or --config FILE (or --compare RUN_A --compare RUN_B)",
                        fix="e.g. rlvr eval --policy scripted:actions.json --tasks code:20 -k 4")
    from rlvr.store.episodes import EpisodeStore

    run_dir = new_eval_dir(output_dir)
    try:
        rep = run_eval(policy, tasks, k=k, seed=seed, config=cfg, out_dir=run_dir, time_limit_s=time_limit,
                       store=EpisodeStore(run_dir, compression=cfg.store.compression), heldout=heldout)
    except BaseException:
        # bad input, or a crash before any episode: nothing half-written
        if not (run_dir / "episodes").exists():
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    path = write_report(rep, run_dir=run_dir)
    if json_out:
        print_json(rep)
    else:
        at_k = [f"pass@{k} [95% CI]"] if k > 1 else []  # with -k 1, pass@k is pass@1: one column
        table = Table("domain", "tasks", "samples", "pass@1 [95% CI]", *at_k, "masked")
        for d, r in rep["domains"].items():
            table.add_row(d, str(r["n"]), str(r["samples"]), pct(r["pass@1"], r["pass@1_ci"]),
                          *([pct(r["pass@k"], r["pass@k_ci"])] if at_k else []), str(r["masked_episodes"]))
        out.print(table)
        loops = {d: r["loop"] for d, r in rep["domains"].items() if r.get("loop")}
        if loops:  # episodes of several turns: the loop's figures
            table = Table("domain (the loop)", "episodes", "first attempt [95% CI]", "recovery rate [95% CI]",
                          "attempts used")
            for d, r in loops.items():
                table.add_row(d, str(r["episodes"]), pct(r["first_attempt_pass"], r["first_attempt_pass_ci"]),
                              pct(r.get("recovery_rate"), r.get("recovery_rate_ci")), f"{r['attempts']:.2f}")
            out.print(table)
        for reason, n in rep["mask_reasons"].items():
            err.print(f"masked: {n} x {reason}", markup=False, highlight=False, soft_wrap=True)
        for reason, row in rep["end_reasons"].items():  # why failures ended early: a budget, a refused call
            refused = f" (refused: {row['refused']})" if row["refused"] else ""
            err.print(f"ended: {row['episodes']} x {reason}{refused}", markup=False, highlight=False,
                      soft_wrap=True)
        for node, c in rep.get("nodes", {}).items():
            err.print(f"node {node}: {c['episodes']} episodes, {c['passed']} passed, {c['masked']} masked, "
                      f"{c['lost']} workspaces lost", markup=False, highlight=False)
    if rep["partial"]:
        why = f"time limit of {time_limit:g} s" if rep["stopped"] == "time limit" else "interrupted"
        err.print(f"partial report ({why}): {rep['episodes']} of {rep['planned_episodes']} episodes finished",
                  markup=False, highlight=False)
    err.print(f"wrote {path} (episodes: rlvr report {run_dir})", markup=False, highlight=False,
              soft_wrap=True)
    if rep["stopped"] == "interrupted":
        raise typer.Exit(130)
    if mostly_masked(rep):  # nothing here is about the policy: say why, keep the report, fail
        err.print(f"eval failed: {rep['masked_episodes']} of {rep['episodes']} episodes were masked by infra "
                  f"faults; first: {rep['first_mask_error']}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
