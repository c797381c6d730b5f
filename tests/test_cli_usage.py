"""Every usage error of every command is one line on stderr, exit 2, never a traceback.

The commands are walked from the CLI itself, so a command added later is covered without editing this file.
"""
from __future__ import annotations

from typing import Any

import pytest
import typer

from rlvr.cli import app, main


def _leaves(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subs = getattr(group, "commands", None)
    if not subs:
        return [(path, group)]
    out = []
    for name, sub in sorted(subs.items()):
        out += _leaves(sub, (*path, name))
    return out


ROOT = typer.main.get_command(app)
COMMANDS = _leaves(ROOT)
GROUPS = [(), *sorted({path[:-1] for path, _ in COMMANDS if len(path) > 1})]


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert rc == 2, (argv, rc, captured.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), (argv, captured.err)
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def test_every_command_is_walked() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"train", "eval", "verify", "tasks list", "tasks show", "sandbox run"} <= names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p))
def test_unknown_option(path: tuple[str, ...], capsys: pytest.CaptureFixture) -> None:
    line = _one_line_exit_2([*path, "--no-such-option-zz"], capsys)
    assert f"rlvr {' '.join(path)}:" in line and "--no-such-option-zz" in line


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "rlvr")
def test_unknown_command_suggests_the_nearest(path: tuple[str, ...], capsys: pytest.CaptureFixture) -> None:
    group = ROOT
    for name in path:
        group = group.commands[name]
    real = min(group.commands)
    line = _one_line_exit_2([*path, real[:-1] + "zq" if len(real) > 2 else real + "zq"], capsys)
    assert "no such command" in line.lower()
    typo = real[0] + real[2:] + real[1] if len(real) > 3 else real + "s"  # a transposition
    assert f"'{real}'" in _one_line_exit_2([*path, typo], capsys)


def _valued(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "option" and not p.is_flag and not p.count]


CASES = [(path, opt) for path, cmd in COMMANDS for opt in _valued(cmd)]


@pytest.mark.parametrize(("path", "opt"), CASES, ids=[f"{' '.join(p)} {o.opts[0]}" for p, o in CASES])
def test_missing_and_malformed_values(path: tuple[str, ...], opt: Any, capsys: pytest.CaptureFixture) -> None:
    flag = opt.opts[0]
    assert flag in _one_line_exit_2([*path, flag], capsys)  # the value is missing
    if opt.type_descriptor.annotation in (int, float):
        line = _one_line_exit_2([*path, flag, "not-a-number"], capsys)
        assert "Invalid value" in line and flag in line
