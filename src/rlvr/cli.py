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


@app.command("eval")
def eval_(
    policy: Annotated[Optional[str], typer.Option(help="hf:PATH_OR_NAME, openai:BASE_URL#MODEL or scripted:FILE.")] = None,
    tasks: Annotated[Optional[str], typer.Option(help="Tasks SPEC: domains or pack paths with optional :N, comma-joined.")] = None,
    k: Annotated[int, typer.Option("-k", help="Samples per task for pass@k.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    compare: Annotated[Optional[list[str]], typer.Option(help="Compare two eval runs: --compare A --compare B.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of task sampling and generation.")] = 0,
    cluster: Annotated[Optional[str], typer.Option(help="Ray address; default local.")] = None,
) -> None:
    """Evaluate a policy: pass@1 and pass@k per domain with confidence intervals."""
    _not_yet("evaluation (`rlvr eval`)")


@app.command()
def verify(
    task_dir: Annotated[Path, typer.Argument(help="The task directory.")],
    workspace_dir: Annotated[Path, typer.Argument(help="The final state of the task's workspace.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the Verdict as one JSON object.")] = False,
) -> None:
    """Verify a final workspace against a task; exit 0 whether or not it passed."""
    _not_yet("verification (`rlvr verify`)")


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory.")]) -> None:
    """Write the run's self-contained HTML report."""
    _not_yet("the run report (`rlvr report`)")


@app.command()
def failures(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    export: Annotated[Optional[str], typer.Option(help="recovery or contrastive.")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Export file (JSONL).")] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Cluster failed episodes by error signature; export recovery or contrastive data."""
    _not_yet("failure mining (`rlvr failures`)")


@app.command()
def query(
    run_dir: Annotated[str, typer.Argument(help="A run directory or URL.")],
    sql: Annotated[str, typer.Argument(help="SQL over the table `episodes`.")],
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Query a run's episodes with DuckDB SQL (table `episodes`)."""
    _not_yet("queries (`rlvr query`)")


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
    """Check a task or pack against the format, and prove its verifiers (gold 1.0, negative controls 0)."""
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
        for r in report_rows:
            table.add_row(r["task"], "[green]ok[/green]" if r["ok"] else "[red]FAIL[/red]", r["detail"])
        out.print(table)
        out.print(f"{sum(r['ok'] for r in report_rows)}/{len(report_rows)} tasks valid")
    if not ok:
        raise typer.Exit(1)


@tasks_app.command("profile")
def tasks_profile(
    policy: Annotated[str, typer.Option(help="Policy SPEC.")],
    tasks: Annotated[str, typer.Option(help="Tasks SPEC.")],
    k: Annotated[int, typer.Option("-k", help="Samples per task.")] = 8,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Pre-flight: per-task pass rates, tiers, learnable share, reward variance, verifier determinism."""
    _not_yet("task profiling (`rlvr tasks profile`)")


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
    _not_yet("the sandbox (`rlvr sandbox run`)")


@sandbox_app.command("check")
def sandbox_check() -> None:
    """Containment self-test: one line per property; exit 1 if any fails."""
    _not_yet("the sandbox self-test (`rlvr sandbox check`)")


@sandbox_app.command("bench")
def sandbox_bench(json_out: Annotated[bool, typer.Option("--json", help="One flat JSON object.")] = False) -> None:
    """Sandbox latency and throughput beside their baselines, measured in the same run."""
    _not_yet("the sandbox benchmark (`rlvr sandbox bench`)")


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
