"""The `rlvr` command line.

Exit codes: 0 done (a failing verdict is still a done verification), 2 bad input (one line naming the file,
field and fix; no traceback), 1 internal error.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from rlvr.errors import NotYetAvailable, UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="rlvr: reinforcement-learning post-training with verifiable rewards.")
tasks_app = typer.Typer(no_args_is_help=True, help="List, show, sample, validate and profile tasks.")
sandbox_app = typer.Typer(no_args_is_help=True, help="Run commands in the sandbox, self-test it, benchmark it.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")

out = Console()
err = Console(stderr=True)


def _not_yet(what: str) -> None:
    raise NotYetAvailable(f"{what} is not available in this version of rlvr yet", fix="see the open issues")


def _print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------------------------- train / eval
@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def train(
    ctx: typer.Context,
    config: Annotated[Optional[str], typer.Argument(help="Run config TOML; omitted: the built-in quickstart.")] = None,
    help_config: Annotated[bool, typer.Option("--help-config", help="Print every config field and exit.")] = False,
    cluster: Annotated[Optional[str], typer.Option(help="Ray address (auto or ray://...); default local.")] = None,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="Resume from the run's last checkpoint.")] = True,
) -> None:
    """Train a policy: the main job. Extra KEY=VALUE arguments override config fields (train.lr=1e-4)."""
    from rlvr.config import describe_fields, load_config

    if help_config:
        table = Table("key", "type", "default", "meaning", show_lines=False)
        for row in describe_fields():
            table.add_row(*row)
        out.print(table)
        return
    overrides = list(ctx.args)
    if config is not None and "=" in config and not Path(config).exists():
        overrides.insert(0, config)
        config = None
    if cluster:
        overrides.append(f'cluster.address="{cluster}"')
    cfg = load_config(config, overrides)
    try:
        from rlvr.train.loop import run as run_training
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("rlvr"):
            _not_yet("training (`rlvr train`)")
        raise UserError(f"training needs {exc.name}", fix="pip install 'rlvr[train]'") from None
    run_training(cfg, resume=resume)


@app.command("eval", context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def eval_(
    ctx: typer.Context,
    policy: Annotated[Optional[str], typer.Option(help="hf:PATH_OR_NAME, openai:BASE_URL#MODEL or scripted:FILE.")] = None,
    tasks: Annotated[Optional[str], typer.Option(help="Tasks SPEC: domains or pack paths with optional :N, comma-joined.")] = None,
    k: Annotated[int, typer.Option("-k", help="Samples per task for pass@k.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    compare: Annotated[Optional[list[str]], typer.Option(help="Compare two eval runs: --compare A B (each an eval.json or its directory).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of task sampling and generation.")] = 0,
    cluster: Annotated[Optional[str], typer.Option(help="Ray address; default local.")] = None,
) -> None:
    """Evaluate a policy: pass@1 and pass@k per domain with confidence intervals."""
    from rlvr.rollout.evaluate import compare as compare_reports
    from rlvr.rollout.evaluate import load_report, run_eval, write_report

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
            _print_json(diff)
            return
        table = Table("domain", "A pass@1", "B pass@1", "B-A pass@1 [95% CI]", f"B-A pass@{diff['k']} [95% CI]", "tasks")
        for d, r in diff["domains"].items():
            table.add_row(d, pct(r["a_pass@1"]), pct(r["b_pass@1"]), pct(r["delta_pass@1"], r["delta_pass@1_ci"]),
                          pct(r["delta_pass@k"], r["delta_pass@k_ci"]), str(r["shared_tasks"]))
        out.print(table)
        return
    if not policy or not tasks:
        raise UserError("give --policy and --tasks (or --compare RUN_A --compare RUN_B)",
                        fix="e.g. rlvr eval --policy scripted:actions.json --tasks code:20 -k 4")
    rep = run_eval(policy, tasks, k=k, seed=seed, cluster=cluster, show_progress=not json_out)
    path = write_report(rep)
    if json_out:
        _print_json(rep)
    else:
        table = Table("domain", "tasks", "samples", "pass@1 [95% CI]", f"pass@{k} [95% CI]", "masked")
        for d, r in rep["domains"].items():
            table.add_row(d, str(r["n"]), str(r["samples"]), pct(r["pass@1"], r["pass@1_ci"]),
                          pct(r["pass@k"], r["pass@k_ci"]), str(r["masked_episodes"]))
        out.print(table)
    err.print(f"wrote {path}", markup=False, highlight=False)


@app.command()
def verify(
    task_dir: Annotated[Path, typer.Argument(help="The task directory.")],
    workspace_dir: Annotated[Path, typer.Argument(help="The final state of the task's workspace.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the Verdict as one JSON object.")] = False,
    seed: Annotated[int, typer.Option(help="Verification seed: randomised hidden cases are drawn from it, and "
                                           "the Verdict records it, so --seed N replays a verdict.")] = 0,
) -> None:
    """Verify a final workspace against a task; exit 0 whether or not it passed."""
    from rlvr.tasks.loaders import load_task_dir
    from rlvr.tasks.spec import FinalState
    from rlvr.verify.base import VerifyContext
    from rlvr.verify.base import verify as run_verify
    from rlvr.verify.code import read_workspace

    task = load_task_dir(task_dir)
    verdict = run_verify(task, FinalState(files=read_workspace(workspace_dir)), VerifyContext(seed=seed))
    if json_out:
        _print_json(verdict.model_dump(mode="json"))
        return
    table = Table("check", "weight", "score", "result", "detail")
    for c in verdict.checks:
        table.add_row(c.name, f"{c.weight:.2f}", f"{c.score:.2f}", "[green]pass[/green]" if c.passed else
                      "[red]fail[/red]", c.detail[:120])
    out.print(table)
    for f in verdict.flags:
        out.print(f"[red]flag {f.kind}[/red]: {f.message}", highlight=False)
        for e in f.evidence[:5]:
            where = f"{e.file or ''}{':' + str(e.line) if e.line else ''}"
            out.print(f"  {where} {e.seen}", markup=False, highlight=False)
    if verdict.infra_error:
        out.print(f"[yellow]infra error[/yellow]: {verdict.infra_error}", highlight=False)
    out.print(f"score {verdict.score:.3f}  passed {verdict.passed}  ({verdict.timings.get('total', 0.0):.2f} s)")


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory.")]) -> None:
    """Write the run's self-contained HTML report."""
    from rlvr.monitor.report import write_report

    out.print(f"wrote {write_report(run_dir)}", markup=False, highlight=False)


@app.command()
def failures(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    export: Annotated[Optional[str], typer.Option(help="recovery or contrastive.")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Export file (JSONL).")] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
    top: Annotated[int, typer.Option(help="Clusters shown (all with --json).")] = 30,
) -> None:
    """Cluster failed episodes by error signature; export recovery or contrastive data."""
    from rlvr.store.episodes import open_run
    from rlvr.store.exports import EXPORTS, write_jsonl
    from rlvr.store.failures import cluster, failed_episodes, load_episodes
    from rlvr.store.layout import RunLayout

    store = open_run(run_dir)
    if export is not None:
        if export not in EXPORTS:
            raise UserError(f"unknown export {export!r}", field="--export", fix=f"use one of: {', '.join(EXPORTS)}")
        records = EXPORTS[export](load_episodes(store))
        path = write_jsonl(records, output or RunLayout(run_dir).export(export))
        if json_out:
            _print_json({"export": export, "records": len(records), "path": str(path)})
        else:
            out.print(f"wrote {len(records)} {export} records to {path}", markup=False, highlight=False)
        return
    clusters = [c.to_json() for c in cluster(failed_episodes(store))]
    if json_out:
        _print_json(clusters)
        return
    from rich.text import Text

    table = Table("count", "signature", "domains", "tasks", "examples")
    for c in clusters[:top]:
        # Signatures quote program output: shown as text, never parsed as rich markup.
        table.add_row(str(c["count"]), Text(c["signature"]), Text(", ".join(f"{d}: {n}" for d, n in
                      c["domains"].items())), str(c["tasks"]), Text(" ".join(c["examples"][:3])))
    out.print(table)
    out.print(f"{sum(c['count'] for c in clusters)} failed episodes in {len(clusters)} clusters")


@app.command()
def query(
    run_dir: Annotated[str, typer.Argument(help="A run directory or URL.")],
    sql: Annotated[str, typer.Argument(help="SQL over the table `episodes`.")],
    json_out: Annotated[bool, typer.Option("--json")] = False,
    max_rows: Annotated[int, typer.Option(help="Rows printed in the table view (all with --json).")] = 100,
) -> None:
    """Query a run's episodes with DuckDB SQL (table `episodes`)."""
    from rlvr.store.episodes import open_run
    from rlvr.store.query import query as run_query

    result = run_query(open_run(run_dir), sql)
    rows = result.to_pylist()
    if json_out:
        _print_json(rows)
        return
    from rich.text import Text

    table = Table()
    for name in result.column_names:
        table.add_column(Text(name))
    for row in rows[:max_rows]:
        table.add_row(*(Text(_cell(v)) for v in row.values()))
    out.print(table)
    out.print(f"{len(rows)} rows" + (f" ({max_rows} shown)" if len(rows) > max_rows else ""))


def _cell(value: object, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------------- tasks
@tasks_app.command("list")
def tasks_list(json_out: Annotated[bool, typer.Option("--json", help="A list of {name, size, description}.")] = False) -> None:
    """Every registered domain with its size (or "procedural") and a one-line description."""
    from rlvr.tasks import registry
    from rlvr.tasks.domains import unavailable

    rows = []
    for name in registry.names():
        src = registry.make(name)
        rows.append({"name": name, "size": src.size if src.size is not None else "procedural",
                     "description": src.description or registry.entry(name).description})
    if json_out:
        _print_json(rows)
        return
    table = Table("domain", "size", "description")
    for r in rows:
        table.add_row(r["name"], str(r["size"]), r["description"])
    out.print(table)
    for mod, why in unavailable().items():
        err.print(f"[yellow]domain module {mod} unavailable: {why}[/yellow]")


@tasks_app.command("show")
def tasks_show(
    ref: Annotated[str, typer.Argument(help="A task directory, DOMAIN:INDEX or DOMAIN/ID.")],
    json_out: Annotated[bool, typer.Option("--json")] = False,
    hidden: Annotated[bool, typer.Option("--hidden", help="Also show hidden material.")] = False,
) -> None:
    """Show one task: its prompt, workspace files and limits."""
    from rlvr.tasks.selection import lookup

    task = lookup(ref)
    data = task.model_dump(mode="json")
    if not hidden:
        for key in ("hidden", "solution", "answer"):
            data.pop(key, None)
    if json_out:
        _print_json(data)
        return
    out.rule(f"[bold]{task.key}[/bold]")
    out.print(task.prompt, markup=False, highlight=False)
    for path, text in task.workspace.items():
        out.rule(f"workspace/{path}")
        out.print(text, markup=False, highlight=False)
    if hidden:
        for path, text in task.hidden.items():
            out.rule(f"hidden/{path}")
            out.print(text, markup=False, highlight=False)
        if task.answer is not None:
            out.rule("answer")
            out.print(repr(task.answer), markup=False)
    out.rule()
    out.print(f"limits: {task.limits.model_dump()}  tier: {task.tier}  source: {task.source}", markup=False)


@tasks_app.command("sample")
def tasks_sample(
    domain: Annotated[str, typer.Argument(help="A domain name or pack path.")],
    n: Annotated[int, typer.Option("-n", help="How many tasks.")] = 3,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print sample tasks of a domain."""
    from rlvr.tasks.selection import open_source

    src = open_source(domain)
    tasks = src.sample(n, seed=seed)
    if json_out:
        _print_json([t.model_dump(mode="json", exclude={"hidden", "solution", "answer"}) for t in tasks])
        return
    for t in tasks:
        out.rule(f"[bold]{t.key}[/bold]")
        out.print(t.prompt, markup=False, highlight=False)


@tasks_app.command("validate")
def tasks_validate(
    path: Annotated[Optional[Path], typer.Argument(help="A task directory, a pack directory or a JSONL pack.")] = None,
    domain: Annotated[Optional[str], typer.Option(help="Validate a sample of a built-in domain instead.")] = None,
    n: Annotated[int, typer.Option("-n", help="Sample size for --domain.")] = 5,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check a task or pack against the format, and prove its verifiers (gold 1.0, negative controls 0).

    Exit 0 when every task is valid, 2 when any is not (bad input: each row names the file, the field and the
    fix), 1 on an internal error.
    """
    from rich.text import Text

    from rlvr.tasks.validate import validate_format

    if (path is None) == (domain is None):
        raise UserError("give exactly one of PATH or --domain NAME", fix="e.g. rlvr tasks validate ./my-pack")
    report_rows = validate_format(path, domain=domain, n=n)
    try:
        from rlvr.verify.proof import prove_rows
    except ModuleNotFoundError as exc:
        if exc.name != "rlvr.verify.proof":
            raise
    else:
        report_rows = prove_rows(report_rows)
    for r in report_rows:
        r.pop("loaded", None)
    ok = bool(report_rows) and all(r["ok"] for r in report_rows)
    if json_out:
        _print_json({"ok": ok, "tasks": report_rows})
    else:
        table = Table("task", "result", "detail")
        for r in report_rows:  # details quote fields as `[id]`: text, never rich markup
            table.add_row(Text(r["task"]), "[green]ok[/green]" if r["ok"] else "[red]FAIL[/red]", Text(r["detail"]))
        out.print(table)
        out.print(f"{sum(r['ok'] for r in report_rows)}/{len(report_rows)} tasks valid")
    if not ok:
        raise typer.Exit(2)


@tasks_app.command("profile")
def tasks_profile(
    policy: Annotated[str, typer.Option(help="Policy SPEC.")],
    tasks: Annotated[str, typer.Option(help="Tasks SPEC.")],
    k: Annotated[int, typer.Option("-k", help="Samples per task.")] = 8,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Pre-flight: per-task pass rates, tiers, learnable share, reward variance, verifier determinism."""
    from rich.progress import Progress

    from rlvr.schedule.profile import print_report, run_profile

    with Progress(console=err, transient=True, disable=json_out or not err.is_terminal) as bar:
        job = bar.add_task("sampling episodes", total=None)
        report = run_profile(policy, tasks, k, progress=lambda done, total: bar.update(job, completed=done,
                                                                                        total=total))
    if json_out:
        _print_json(report.to_json())
    else:
        print_report(report, out)


# -------------------------------------------------------------------------------------------------- sandbox
@sandbox_app.command("run", context_settings={"allow_interspersed_args": False})
def sandbox_run(
    cmd: Annotated[list[str], typer.Argument(help="The command (after --).")],
    workspace: Annotated[Optional[Path], typer.Option(help="Directory copied into the sandbox (never modified).")] = None,
    timeout: Annotated[float, typer.Option(help="Wall-clock limit in seconds.")] = 10.0,
    memory: Annotated[int, typer.Option(help="Memory limit in MiB.")] = 512,
    json_out: Annotated[bool, typer.Option("--json", help="Print the ExecResult as JSON.")] = False,
) -> None:
    """Run one command in a sandbox on a copy of a workspace and print the ExecResult."""
    from rlvr.sandbox import ExecLimits, ExecStatus
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.workspace import list_files, read_file

    if not cmd:
        raise UserError("no command given", field="CMD", fix="write e.g. rlvr sandbox run -- python -c 'print(1)'")
    files: dict[str, bytes] = {}
    if workspace is not None:
        if not workspace.is_dir():
            raise UserError("not a directory", file=workspace, field="--workspace", fix="pass an existing directory")
        files = {rel: read_file(workspace, rel) or b"" for rel in list_files(workspace)}
    if timeout <= 0 or memory < 16:
        raise UserError(f"out of range (timeout {timeout}, memory {memory})", field="--timeout/--memory",
                        fix="use a timeout above 0 seconds and at least 16 MiB of memory")
    limits = ExecLimits(timeout_s=timeout, memory_mb=memory)
    with BwrapPool(limits, workers=1, spares=0) as pool, pool.lease(files) as sb:
        result = sb.run(list(cmd), limits=limits)
    if json_out:
        _print_json(result.model_dump(mode="json"))
    else:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        err.print(f"[{result.status.value}] exit={result.exit_code} signal={result.signal} "
                  f"wall={result.wall_s * 1000:.1f}ms cpu={result.cpu_s * 1000:.1f}ms "
                  f"peak={result.peak_memory_mb:.1f}MiB", markup=False, highlight=False)
    if result.status is ExecStatus.infra_error:
        raise typer.Exit(1)


@sandbox_app.command("check")
def sandbox_check() -> None:
    """Containment self-test: one line per property; exit 1 if any fails."""
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.selftest import run_checks

    with BwrapPool(workers=1, spares=0) as pool:
        results = run_checks(pool)
    for r in results:
        mark = "[green]PASS[/green]" if r.passed else "[red]FAIL[/red]"
        out.print(f"{mark} {r.name}: [dim]{r.detail}[/dim]", highlight=False, soft_wrap=True)
    failed = sum(not r.passed for r in results)
    out.print(f"{len(results) - failed}/{len(results)} containment checks passed")
    if failed:
        raise typer.Exit(1)


@sandbox_app.command("bench")
def sandbox_bench(json_out: Annotated[bool, typer.Option("--json", help="One flat JSON object.")] = False) -> None:
    """Sandbox latency and throughput beside their baselines, measured in the same run."""
    from rich.progress import Progress

    from rlvr.sandbox.bench import figures_table, run_bench

    n = 200
    with Progress(console=err, transient=True, disable=json_out) as progress:
        task = progress.add_task("sandbox bench", total=n + n // 4 + n // 10 + n // 40)
        figures = run_bench(n, progress=lambda: progress.advance(task))
    if json_out:
        _print_json({k: round(v, 3) for k, v in figures.items()})
        return
    out.print(figures_table(figures))


# ------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    """Entry point: maps UserError to one line on stderr and exit 2."""
    try:
        rc = app(args=argv, standalone_mode=False)  # click returns the code of typer.Exit here
    except UserError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err.print("aborted")
        return 130
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        raise
    return rc if isinstance(rc, int) else 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
