"""Shared fixtures: task directories on disk and an in-process CLI runner."""
from __future__ import annotations

import io
import os
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def _run_cli(args: list[str]) -> CliResult:
    from rlvr.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        # rich consoles bound to sys.stdout at import time: rebind for the call
        from rlvr import cli

        saved = cli.out._file, cli.err._file  # None: follow sys.stdout / sys.stderr (as capsys swaps them)
        cli.out.file, cli.err.file = out, err
        try:
            code = main(args)
        finally:
            cli.out._file, cli.err._file = saved
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> Callable[[list[str]], CliResult]:
    """Run `rlvr ARGS` in-process; returns exit code, stdout and stderr."""
    return _run_cli


def write_task(root: Path, name: str, *, toml: str | None = None, prompt: str = "Write add(a, b).",
               workspace: dict[str, str] | None = None, hidden: dict[str, str] | None = None,
               solution: dict[str, str] | None = None) -> Path:
    """Create a task directory under `root`."""
    d = root / name
    d.mkdir(parents=True)
    (d / "task.toml").write_text(toml if toml is not None else f'id = "{name}"\ndomain = "code"\n')
    if prompt is not None:
        (d / "prompt.md").write_text(prompt)
    for sub, files in (("workspace", workspace), ("hidden", hidden), ("solution", solution)):
        for rel, text in (files or {}).items():
            p = d / sub / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    return d


ADD_WORKSPACE = {"add.py": "def add(a, b):\n    raise NotImplementedError\n",
                 "test_visible.py": "from add import add\n\ndef test_one():\n    assert add(1, 1) == 2\n"}
ADD_HIDDEN = {"test_hidden.py": "from add import add\n\ndef test_a():\n    assert add(2, 3) == 5\n\n"
                                "def test_b():\n    assert add(-1, 1) == 0\n"}
ADD_SOLUTION = {"add.py": "def add(a, b):\n    return a + b\n"}


@pytest.fixture
def add_task(tmp_path: Path) -> Path:
    """A minimal, valid code task directory (only id and domain in task.toml)."""
    return write_task(tmp_path, "add", workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN, solution=ADD_SOLUTION)


def child_pids(pid: int) -> list[int]:
    """The children of every thread of a process (none if it is gone). A thread that ends while it is read is
    skipped, not taken for the whole process: its children move to another thread, read next time."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return []
    out: list[int] = []
    for t in threads:
        try:
            out += [int(c) for c in (t / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out
