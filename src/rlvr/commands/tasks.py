"""`rlvr tasks`: list, show, sample, build, validate, profile and export tasks."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rlvr.commands.console import err, out
from rlvr.commands.console import print_json as _print_json
from rlvr.errors import UserError

tasks_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="List, show, sample, build, validate, profile and export tasks.")


ListJson = Annotated[bool, typer.Option("--json", help="A list of {name, size, description}.")]
DomainsConfig = Annotated[Path | None, typer.Option(
    "--config", help="A run config TOML whose [tasks.domains] settings build the domains (default: each "
                     "domain's own, as every command without a config builds them).")]


def _domain_settings(config: Path | None) -> dict[str, Any]:
    """The `[tasks.domains]` settings of a run config file (none without one)."""
    if config is None:
        return {}
    from rlvr.config import load_config

    return load_config(config).tasks.domains


@tasks_app.command("list")
def tasks_list(
    spec: Annotated[str | None, typer.Argument(help="A tasks SPEC (a pack, harbor:PATH, ...): list its tasks "
                                                    "instead of the domains.")] = None,
    json_out: ListJson = False,
) -> None:
    """Every registered domain with its size (or "procedural") and a one-line description; with a SPEC, the
    ids of the tasks it names (finite sources only)."""
    from rlvr.tasks import registry
    from rlvr.tasks.registry import unavailable

    if spec is not None:
        _list_spec(spec, json_out)
        return
    rows = []
    for name in registry.names():
        src = registry.make(name)
        rows.append({"name": name, "size": src.size if src.size is not None else "procedural",
                     "description": src.description or registry.entry(name).description})
    for plugin, why in unavailable().items():  # a broken plugin is one line; the others are listed
        err.print(f"domain plugin {plugin!r} not loaded: {why}", markup=False, highlight=False,
                  soft_wrap=True)
    if json_out:
        _print_json(rows)
        return
    from rich.text import Text

    table = Table("domain", "size", "description")
    for r in rows:  # descriptions quote `[min, max]` and markdown links: text, never markup
        table.add_row(r["name"], str(r["size"]), Text(r["description"]))
    out.print(table)


def _list_spec(spec: str, json_out: bool) -> None:
    from rlvr.tasks.selection import parse

    rows = []
    for sel in parse(spec):
        if sel.source.size is None:
            raise UserError(f"{sel.source.name!r} is procedural: its tasks cannot be listed", field="SPEC",
                            fix=f"rlvr tasks sample {sel.source.name}")
        rows += [{"source": sel.source.name, "id": sel.source.id_at(i)} for i in sel.source.indices(sel.n)]
    if json_out:
        _print_json(rows)
        return
    table = Table("source", "task")
    for r in rows:
        table.add_row(r["source"], r["id"])
    out.print(table)
    out.print(f"{len(rows)} tasks")


@tasks_app.command("show")
def tasks_show(
    ref: Annotated[str, typer.Argument(help="A task directory, DOMAIN:INDEX, DOMAIN/ID or harbor:PATH.")],
    json_out: Annotated[bool, typer.Option("--json")] = False,
    hidden: Annotated[bool, typer.Option("--hidden", help="Also show hidden material.")] = False,
    config: DomainsConfig = None,
) -> None:
    """Show one task: its prompt, workspace files and limits. `DOMAIN:I` is the I-th task of the SPEC
    `DOMAIN:N` in `rlvr eval`, `rlvr serve` and the adapters (under the same [tasks.domains] settings)."""
    from rlvr.tasks.selection import lookup

    task = lookup(ref, _domain_settings(config))
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
    config: DomainsConfig = None,
) -> None:
    """Print sample tasks of a domain: the tasks the SPEC `DOMAIN:N` names everywhere (with --seed, for a
    finite domain or pack)."""
    from rlvr.tasks.selection import open_source

    src = open_source(domain, **_domain_settings(config).get(domain, {}))
    tasks = src.sample(n, seed=seed)
    if json_out:
        _print_json([t.model_dump(mode="json", exclude={"hidden", "solution", "answer"}) for t in tasks])
        return
    for t in tasks:
        out.rule(f"[bold]{t.key}[/bold]")
        out.print(t.prompt, markup=False, highlight=False)


@tasks_app.command("build")
def tasks_build(
    kind: Annotated[str, typer.Argument(help="What to build: repo.")],
    sources: Annotated[list[str],
                       typer.Argument(help="Project dirs, git checkouts or pypi:NAME==VERSION (`repo-real`: "
                                           "the built-in pack).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Pack directory to write the tasks to.")],
    n: Annotated[int, typer.Option("-n", help="Most tasks per project.")] = 50,
    domain: Annotated[str, typer.Option(help="Domain written into each task.toml.")] = "repo",
    json_out: Annotated[bool, typer.Option("--json", help="Print the build report as JSON.")] = False,
) -> None:
    """Turn real Python projects into verified bug-fix and implementation tasks (see
    rlvr.domains.repo.build)."""
    from rlvr.domains.repo.build.command import run_build
    from rlvr.sandbox import make_pool

    run_build(kind, sources, output, n, lambda python: make_pool(python=python, workers=2, spares=0),
              domain=domain, json_out=json_out, console=out, gold_check=_gold_check)


def _gold_check(task: Any) -> set[str] | None:
    """The hidden tests the code verifier fails on a built project's original tree (None: it passes)."""
    from rlvr.tasks.spec import FinalState
    from rlvr.verify.base import default_pool
    from rlvr.verify.scorer import Scorer

    v = Scorer(default_pool(), retries=0, cache=False).score(task,
                                                             FinalState(files=dict(task.workspace))).verdict
    return None if v.passed and v.score == 1.0 else {c.name for c in v.checks if not c.passed}


@tasks_app.command("validate")
def tasks_validate(
    path: Annotated[str | None,
                    typer.Argument(help="A task directory, a pack directory, a JSONL pack, or harbor:PATH "
                                        "(a Harbor task or a directory of them).")] = None,
    domain: Annotated[str | None,
                      typer.Option(help="Validate a sample of a built-in domain instead.")] = None,
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
            table.add_row(Text(r["task"]), "[green]ok[/green]" if r["ok"] else "[red]FAIL[/red]",
                          Text(r["detail"]))
        out.print(table)
        out.print(f"{sum(r['ok'] for r in report_rows)}/{len(report_rows)} tasks valid")
    if not ok:
        raise typer.Exit(2)


@tasks_app.command("profile")
def tasks_profile(
    tasks: Annotated[str, typer.Option(help="Tasks SPEC.")],
    policy: Annotated[str | None, typer.Option(help="Policy SPEC; default the config's [policy].")] = None,
    k: Annotated[int, typer.Option("-k", help="Samples per task.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed of task sampling and generation.")] = 0,
    config: Annotated[Path | None, typer.Option("--config", help="A run config TOML: its [tasks.domains], "
                                                "[policy], [rollout], [sandbox], [cluster] and [schedule] "
                                                "sections apply.")] = None,
    cluster: Annotated[str | None, typer.Option(help="Ray address; default local (or the config's).")] = None,
    json_out: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Pre-flight: per-task pass rates, tiers, learnable share, reward variance, verifier determinism."""
    from rich.progress import Progress

    from rlvr.commands.eval import eval_config
    from rlvr.commands.profile import run_profile
    from rlvr.schedule.profile import print_report

    if policy is None and config is None:
        raise UserError("give --policy, or --config FILE with a [policy] section", field="--policy",
                        fix="e.g. rlvr tasks profile --policy scripted:actions.json --tasks code:20")
    cfg = eval_config(config, cluster=cluster)
    with Progress(console=err, transient=True, disable=json_out or not err.is_terminal) as bar:
        job = bar.add_task("sampling episodes", total=None)
        report = run_profile(policy, tasks, k, seed=seed, cfg=cfg,
                             progress=lambda done, total: bar.update(job, completed=done, total=total))
    if json_out:
        _print_json(report.to_json())
    else:
        print_report(report, out)


@tasks_app.command("sft-data")
def tasks_sft_data(
    spec: Annotated[str, typer.Argument(help="Tasks SPEC of a domain with reference solutions.")],
    out_path: Annotated[Path, typer.Option("-o", "--output", help="The JSONL file to write.")],
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    config: Annotated[Path | None, typer.Option("--config", help="A run config TOML: its [tasks.domains], "
                                                "[rollout], [sandbox] and [cluster] sections apply.")] = None,
) -> None:
    """Gold tool trajectories as a chat dataset: each task's reference played through the env (tools run in
    the sandbox), one conversation a line with `messages` and `tools` (TRL's SFTTrainer reads it)."""
    from rlvr.commands.eval import eval_config
    from rlvr.commands.gold import write_sft_data

    written, total = write_sft_data(spec, out_path, eval_config(config), seed=seed)
    err.print(f"wrote {written} conversations to {out_path} ({total - written} of {total} tasks gave "
              f"no passing "
              "trajectory)", markup=False, highlight=False, soft_wrap=True)


EXPORT_FORMATS = ("verl", "harbor")


@tasks_app.command("export")
def tasks_export(
    spec: Annotated[str | None, typer.Argument(help="Tasks SPEC (or --tasks).")] = None,
    tasks: Annotated[str | None, typer.Option(help="Tasks SPEC (verl: single-turn domains).")] = None,
    out_path: Annotated[Path | None, typer.Option("-o", "--output", help="verl: the Parquet file to write; "
                                                  "harbor: the new directory of Harbor tasks.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="verl or harbor.")] = "verl",
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
) -> None:
    """Write tasks as another trainer's dataset (verl: prompt, data_source, reward_model, extra_info), or as
    Harbor tasks whose tests run rlvr's verifier (harbor: docs/HARBOR.md)."""
    if (spec is None) == (tasks is None):
        raise UserError("give the tasks SPEC once, as an argument or as --tasks", field="SPEC",
                        fix="e.g. rlvr tasks export --format harbor -o out code:5")
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"unknown export format {fmt!r}", field="--format",
                        fix=f"use {' or '.join(EXPORT_FORMATS)}")
    if out_path is None:
        raise UserError("no output given", field="--output", fix="add -o PATH")
    spec = spec or tasks
    assert spec is not None
    if fmt == "harbor":
        from rlvr.domains.harbor.export import export as export_harbor
        from rlvr.tasks.selection import resolve

        names = export_harbor(resolve(spec, seed=seed), out_path)
        err.print(f"wrote {len(names)} Harbor tasks to {out_path}", markup=False, highlight=False)
        return
    from rlvr.integrations.verl import export

    err.print(f"wrote {export(spec, out_path, fmt=fmt, seed=seed)} rows to {out_path}", markup=False,
              highlight=False)
