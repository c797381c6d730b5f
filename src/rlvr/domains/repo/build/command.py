"""The body of `rlvr tasks build repo SOURCE... -o PACK [-n N]`: build, then print the build report."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlvr.domains.repo.build.builder import BuildReport, GoldCheck, PoolFactory, build
from rlvr.errors import UserError

KINDS = ("repo",)


def run_build(kind: str, sources: list[str], out: Path, n: int, pool_factory: PoolFactory, *,
              domain: str = "repo",
              json_out: bool = False, console: Console | None = None, cache: Path | None = None,
              gold_check: GoldCheck | None = None) -> BuildReport:
    if kind not in KINDS:
        raise UserError(f"unknown build kind {kind!r}", field="KIND", fix=f"use one of {', '.join(KINDS)}")
    if n < 1:
        raise UserError("-n must be at least 1", field="-n", fix="e.g. -n 50")
    console = console or Console()
    if sources == ["repo-real"]:
        return _built_in(out, n, pool_factory, json_out, console, gold_check)
    report = build(sources, out, pool_factory, n=n, domain=domain, cache=cache, show_progress=not json_out,
                   gold_check=gold_check)
    if json_out:
        console.print_json(json.dumps(report.to_json()))
        return report
    table = Table("project", "tests found/kept", "flaky/slow/failing/harness", "tried (mut/impl/rev)",
                  "kept (mut/impl/rev)",
                  "seconds", "skipped because")
    gens = ("mutation", "implement", "revert")
    for p in report.projects:
        table.add_row(f"{p.name} {p.version}", f"{p.tests_found}/{p.tests_kept}",
                      f"{p.flaky}/{p.slow}/{p.failing}/{p.harness_failing}",
                      "/".join(str(p.tried.get(g, 0)) for g in gens),
                      "/".join(str(p.kept.get(g, 0)) for g in gens),
                      f"{p.seconds:.0f}", p.skipped or "-")
    console.print(table)
    for p in report.projects:  # a pin relaxed: one that could not install here, or that the harness cannot
        for note in p.relaxed:  # run on (its note says why)
            why = "" if note.endswith(")") else " (the environment did not build with the pin)"
            console.print(f"{p.name} {p.version}: relaxed {note}{why}", markup=False, highlight=False)
    console.print(f"{report.tasks} tasks written to {out} in {report.seconds:.0f} s")
    return report


def _built_in(out: Path, n: int, pool_factory: PoolFactory, json_out: bool, console: Console,
              gold_check: GoldCheck | None) -> BuildReport:
    """The repo-real pack from its pinned projects, rebuilt only when the pins or `n` changed (a stamp in the
    pack records what it was built from and its build report)."""
    from rlvr.domains.repo.real import BUILD_VERSION, PROJECTS, STAMP

    want = {"projects": list(PROJECTS), "n": n, "builder": BUILD_VERSION}
    stamp = out / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()).get("want") == want:
        console.print(f"repo-real pack up to date: {json.loads(stamp.read_text())['tasks']} tasks in {out}")
        return BuildReport(out=out)
    # built beside the old pack and swapped in whole: no task of another build stays, nothing is half-written
    building = out.parent / f".{out.name}.building"
    shutil.rmtree(building, ignore_errors=True)
    report = run_build("repo", list(PROJECTS), building, n, pool_factory, domain="repo-real",
                       json_out=json_out,
                       console=console, cache=out.parent / "build", gold_check=gold_check)
    (building / STAMP).write_text(json.dumps({"want": want, "tasks": report.tasks,
                                              "report": report.to_json()},
                                             indent=1))
    shutil.rmtree(out, ignore_errors=True)
    building.rename(out)
    report.out = out
    return report
