"""`rlvr sandbox`: run a command in the sandbox, self-test its containment, benchmark it."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rlvr.commands.console import err, out
from rlvr.commands.console import print_json as _print_json
from rlvr.errors import UserError

sandbox_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="Run commands in the sandbox, self-test it, benchmark it.")


@sandbox_app.command("run", context_settings={"allow_interspersed_args": False})
def sandbox_run(
    cmd: Annotated[list[str], typer.Argument(help="The command (after --).")],
    workspace: Annotated[Path | None,
                         typer.Option(help="Directory copied into the sandbox (never modified).")] = None,
    timeout: Annotated[float, typer.Option(help="Wall-clock limit in seconds.")] = 10.0,
    memory: Annotated[int, typer.Option(help="Memory limit in MiB.")] = 512,
    json_out: Annotated[bool, typer.Option("--json", help="Print the ExecResult as JSON.")] = False,
    image: Annotated[str | None, typer.Option(help="Run in this image (dockerfile:DIR, docker-archive:FILE, "
                                                   "oci:DIR, NAME; docs/IMAGES.md).")] = None,
    network: Annotated[bool, typer.Option("--network", help="Give the command network access.")] = False,
) -> None:
    """Run one command in a sandbox on a copy of a workspace and print the ExecResult."""
    from rlvr.sandbox import ExecLimits, ExecStatus
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.workspace import list_files, read_file

    if not cmd:
        raise UserError("no command given", field="CMD",
                        fix="write e.g. rlvr sandbox run -- python -c 'print(1)'")
    files: dict[str, bytes] = {}
    if workspace is not None:
        if not workspace.is_dir():
            raise UserError("not a directory", file=workspace, field="--workspace",
                            fix="pass an existing directory")
        files = {rel: read_file(workspace, rel) or b"" for rel in list_files(workspace)}
    if timeout <= 0 or memory < 16:
        raise UserError(f"out of range (timeout {timeout}, memory {memory})", field="--timeout/--memory",
                        fix="use a timeout above 0 seconds and at least 16 MiB of memory")
    limits = ExecLimits(timeout_s=timeout, memory_mb=memory)
    with BwrapPool(limits, workers=1, spares=0, allow_network=network) as pool, \
            pool.lease(files, image=image, network=network) as sb:
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
def sandbox_check(image: Annotated[str | None, typer.Option(
        "--image", help="Run the checks inside this image (dockerfile:DIR, docker-archive:FILE, oci:DIR, "
                        "NAME...): built or pulled and unpacked first.")] = None) -> None:
    """Containment self-test: one line per property; exit 1 if any fails."""
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.selftest import run_checks

    # probe: in an image without Python the checks' programs run on the supervisor's own interpreter, in the
    # image's jail; they test the jail, which is the same whatever program runs in it
    with BwrapPool(workers=1, spares=0, probe=image is not None) as pool:
        if image is not None:
            root = pool.resolve_image(image)
            how = f"its Python {root.python_version}" if root.python else "rlvr's Python (the image has none)"
            err.print(f"image {root.id[:12]}: checks run on {how}, as uid {root.uid}", markup=False,
                      highlight=False)
        results = run_checks(pool, image=image)
    for r in results:
        mark = "[green]PASS[/green]" if r.passed else "[red]FAIL[/red]"
        out.print(f"{mark} {r.name}: [dim]{r.detail}[/dim]", highlight=False, soft_wrap=True)
    failed = sum(not r.passed for r in results)
    out.print(f"{len(results) - failed}/{len(results)} containment checks passed")
    if failed:
        raise typer.Exit(1)


@sandbox_app.command("bench")
def sandbox_bench(json_out: Annotated[bool,
                                      typer.Option("--json", help="One flat JSON object.")] = False) -> None:
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
