"""The `rlvr` command line: the run commands (train, eval, verify, export, serve, report, failures, query) and
the entry point; the `tasks`, `sandbox`, `images`, `domains` and `node` groups live in rlvr.commands.

Exit codes: 0 done (a failing verdict is still a done verification), 2 bad input (one line naming the file,
field and fix; no traceback), 1 internal error.
"""
from __future__ import annotations

import inspect
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rlvr.commands.console import cell as _cell
from rlvr.commands.console import err, out
from rlvr.commands.console import not_yet as _not_yet
from rlvr.commands.console import print_json as _print_json
from rlvr.commands.domains import domains_app
from rlvr.commands.eval import eval_command
from rlvr.commands.images import images_app
from rlvr.commands.node import node_app
from rlvr.commands.sandbox import sandbox_app
from rlvr.commands.tasks import tasks_app
from rlvr.errors import MostlyMasked, RankLost, Stalled, UserError

RANK_LOST_GRACE_S = 3.0
"""Seconds a surviving rank waits before exiting after a peer died (torchrun polls its workers every 0.1
s)."""

# Help is plain text (rich_markup_mode=None, in every group too): rich markup would eat the config sections
# that help texts name, `[tasks.domains]` or `[agent]`, and every word of a docstring must reach the reader.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="rlvr: reinforcement-learning post-training with verifiable rewards.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(domains_app, name="domains")
app.add_typer(node_app, name="node")
app.add_typer(images_app, name="images")


# --------------------------------------------------------------------------------------------- train / eval
@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def train(
    ctx: typer.Context,
    config: Annotated[str | None,
                      typer.Argument(help="Run config TOML; omitted: the built-in quickstart.")] = None,
    help_config: Annotated[bool,
                           typer.Option("--help-config", help="Print every config field and exit.")] = False,
    cluster: Annotated[str | None, typer.Option(
        help="Ray address (auto or ray://...): sandboxes on Ray, and with train.world_size > 1 one "
             "rank per Ray actor; default local.")] = None,
    resume: Annotated[bool,
                      typer.Option("--resume/--no-resume",
                                   help="Resume from the run's last checkpoint.")] = True,
) -> None:
    """Train a policy: the main job. Extra KEY=VALUE arguments override config fields (train.lr=1e-4). Several
    ranks: `torchrun --nproc-per-node N -m rlvr train CONFIG`, or --cluster with train.world_size = N."""
    from rlvr.config import QUICKSTART, describe_fields, load_config

    if help_config:
        from rich.text import Text

        table = Table("key", "type", "default", "meaning", show_lines=False)
        for row in describe_fields():  # docs name sections as `[tasks.domains]`: text, never markup
            table.add_row(*(Text(c) for c in row))
        out.print(table)
        return
    overrides = list(ctx.args)
    if config is not None and "=" in config and not Path(config).exists():
        overrides.insert(0, config)
        config = None
    if cluster:
        overrides.append(f'cluster.address="{cluster}"')
    cfg = load_config(QUICKSTART if config is None else config, overrides)  # no file: the quickstart
    try:
        import rlvr.train.loop  # noqa: F401 (torch and transformers: a core install cannot train)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("rlvr"):
            _not_yet("training (`rlvr train`)")
        raise UserError(f"training needs {exc.name}", fix="pip install 'rlvr[train]'") from None
    from rlvr.run import train as run_training

    run_training(cfg, resume=resume)


app.command("eval",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": False})(eval_command)


@app.command()
def verify(
    task_dir: Annotated[Path, typer.Argument(help="The task directory.")],
    workspace_dir: Annotated[Path, typer.Argument(help="The final state of the task's workspace.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the Verdict as one JSON object.")] = False,
    seed: Annotated[int,
                    typer.Option(help="Verification seed: randomised hidden cases are drawn from it, and "
                                           "the Verdict records it, so --seed N replays a verdict.")] = 0,
) -> None:
    """Verify a final workspace against a task; exit 0 whether or not it passed."""
    from rlvr.tasks.loaders import load_task_dir, read_workspace, refused_links
    from rlvr.tasks.spec import FinalState
    from rlvr.verify.scorer import Scorer

    task = load_task_dir(task_dir)
    final = FinalState(files=read_workspace(workspace_dir), refused=refused_links(workspace_dir))
    verdict = Scorer(cache=False).score(task, final, seed).verdict
    if json_out:
        _print_json(verdict.model_dump(mode="json"))
        return
    from rich.text import Text

    table = Table("check", "weight", "score", "result", "detail")
    for c in verdict.checks:  # details quote program output: text, never markup
        table.add_row(Text(c.name), f"{c.weight:.2f}", f"{c.score:.2f}",
                      "[green]pass[/green]" if c.passed else "[red]fail[/red]", Text(c.detail))
    out.print(table)
    for f in verdict.flags:
        out.print(Text.assemble((f"flag {f.kind}", "red"), f": {f.message}"), highlight=False)
        for e in f.evidence:
            where = f"{e.file or ''}{':' + str(e.line) if e.line else ''}"
            out.print(f"  {where} {e.seen}", markup=False, highlight=False)
    if verdict.infra_error:
        out.print(f"[yellow]infra error[/yellow]: {verdict.infra_error}", highlight=False)
    out.print(f"score {verdict.score:.3f}  passed {verdict.passed}  "
              f"({verdict.timings.get('total', 0.0):.2f} s)")


@app.command("export")
def export_(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="New directory to write.")],
    adapter: Annotated[bool,
                       typer.Option("--adapter",
                                    help="Keep LoRA as a peft adapter (default: merged).")] = False,
) -> None:
    """Write the run's last checkpoint as a plain Hugging Face directory (load it with `--policy hf:DIR`)."""
    from rlvr.train.checkpoint import export

    out.print(f"wrote {export(run_dir, output, adapter=adapter)}", markup=False, highlight=False)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory, or an eval directory (rlvr eval).")],
    compare: Annotated[Path | None, typer.Option(
        "--compare",
        help="A second eval directory (or its eval.json), shown side by side with RUN_DIR's eval.")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output",
        help="File to write; default RUN_DIR/report.html (with --compare RUN_DIR/compare-B.html).")] = None,
) -> None:
    """Write the self-contained HTML report of a run, or of an eval (pass@k per domain, per-task outcomes,
    masked episodes, transcripts); `--compare EVAL_B` puts a second eval beside it."""
    from rlvr.monitor.report import write_report

    out.print(f"wrote {write_report(run_dir, output, compare_with=compare)}", markup=False, highlight=False)


@app.command()
def failures(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    export: Annotated[str | None, typer.Option(help="recovery or contrastive.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Export file (JSONL).")] = None,
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
            raise UserError(f"unknown export {export!r}", field="--export",
                            fix=f"use one of: {', '.join(EXPORTS)}")
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
    from rlvr.store.query import rows as plain_rows

    result = run_query(open_run(run_dir), sql)
    rows = plain_rows(result)  # DuckDB's HUGEINT sums and DECIMALs as JSON numbers, not strings
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


@app.command()
def serve(
    tasks: Annotated[str, typer.Option(help="Tasks SPEC to serve.")],
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    token_file: Annotated[Path | None, typer.Option(help="File holding the bearer token every request "
                                                         "must carry.")] = None,
    idle_timeout: Annotated[float,
                            typer.Option(help="Seconds before an idle session's sandbox "
                                              "is released.")] = 600.0,
    max_sessions: Annotated[int, typer.Option(help="Concurrent sessions allowed.")] = 64,
    reclaim_after: Annotated[float, typer.Option(
        help="Seconds a session opened over HTTP (openenv 0.10's client) outlives its client's WebSocket "
             "before its sandbox is given back.")] = 5.0,
    config: Annotated[Path | None,
                      typer.Option("--config", help="A run config TOML: its [tasks.domains], sandbox, "
                                                "cluster and scoring settings apply.")] = None,
) -> None:
    """Serve tasks as an OpenEnv environment: one session per client, MCP tool calls (JSON-RPC over HTTP /mcp,
    or WebSocket steps), the verdict at the end."""
    # openenv's optional web UI: unused here, most of its start-up
    sys.modules.setdefault("gradio", None)  # type: ignore[arg-type]
    try:
        from rlvr.integrations.openenv import serve as run_server
    except ModuleNotFoundError as exc:
        raise UserError(f"rlvr serve needs {exc.name}", fix="pip install 'rlvr[openenv]'") from None
    from rlvr.config import load_config

    run_server(tasks, host=host, port=port, token_file=str(token_file) if token_file else None,
               idle_timeout=idle_timeout, max_sessions=max_sessions, reclaim_after=reclaim_after,
               config=load_config(config) if config is not None else None)


# ------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    """Entry point: maps UserError to one line on stderr and exit 2."""
    try:
        rc = command().main(args=argv, prog_name="rlvr", standalone_mode=False)  # returns typer.Exit's code
    except UserError as exc:
        # Every rank of a torch.distributed job refuses the same input, and each says so before it exits: the
        # launcher stops the others as soon as one exits, so a line left to one rank could be lost.
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.stderr.flush()
        return 2
    except MostlyMasked as exc:  # the infrastructure failed, not the policy: one line, what was kept is kept
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 1
    except (Stalled, RankLost) as exc:  # a watchdog fired, or a peer rank died: threads stuck, not joinable
        RankLost.reported = True
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.stdout.flush()
        sys.stderr.flush()
        # let the launcher (which polls its workers) see the dead rank fail first,
        if isinstance(exc, RankLost):
            time.sleep(RANK_LOST_GRACE_S)  # so its report names that rank, not this survivor
        os._exit(1)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err.print("aborted")
        return 130
    except Exception as exc:
        usage = _usage_error(exc, argv)
        if usage is None:
            raise
        err.print(f"error: {usage}", markup=False, highlight=False, soft_wrap=True)
        return 2
    return rc if isinstance(rc, int) else 0


def command() -> Any:
    """The click command of `app`, each subcommand listed in its group's help with the whole first sentence of
    its docstring (click would cut it to the width left with "...")."""
    root = typer.main.get_command(app)

    def whole(group: Any) -> None:
        for sub in getattr(group, "commands", {}).values():
            if not sub.short_help and sub.help:
                first = " ".join(inspect.cleandoc(sub.help).split("\n\n")[0].split())
                end = first.find(". ")
                sub.short_help = first if end < 0 else first[: end + 1]
            whole(sub)

    whole(root)
    return root


def _usage_error(exc: BaseException, argv: list[str] | None) -> str | None:
    """A command-line usage error (unknown option or command, missing or malformed value) as one line with the
    command, the problem, a "did you mean" where there is one, and where to look; None for anything else.

    Typer raises the exceptions of the click it vendors (`typer._click`), not those of a separately
    installed click, so both are recognised by their base class."""
    if not any(c.__name__ == "ClickException" for c in type(exc).__mro__):
        return None
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else _command_path(argv)
    message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
    possibilities = sorted(getattr(exc, "possibilities", None) or [])
    if possibilities and not any(w in message.lower() for w in ("did you mean", "possible option")):
        message += f" (did you mean {', '.join(possibilities[:3])}?)"
    return f"{command}: {message} (see `{command} --help`)"


def _command_path(argv: list[str] | None) -> str:
    """`rlvr tasks show` from the leading words of argv that name commands (for errors click gives no
    context)."""
    group: Any = typer.main.get_command(app)
    words = ["rlvr"]
    for token in sys.argv[1:] if argv is None else argv:
        sub = getattr(group, "commands", {}).get(token)
        if sub is None:
            break
        words.append(token)
        group = sub
    return " ".join(words)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
