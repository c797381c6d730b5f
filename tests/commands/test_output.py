"""What the CLI prints survives a pipe: nothing cut, no markup eating words, tables as plain lines; every help
text renders every word of its docstring, for every command and group of the CLI."""
from __future__ import annotations

import inspect
import json
from typing import Any

import pytest

from rlvr.cli import command
from rlvr.config import describe_fields


def _squashed(text: str) -> str:
    return "".join(text.split())


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group under `group` (the typer app's click tree), with its path of words."""
    out = []
    for name, sub in sorted(getattr(group, "commands", {}).items()):
        out.append(((*path, name), sub))
        out.extend(_commands(sub, (*path, name)))
    return out


COMMANDS = _commands(command())


def test_the_walk_reaches_every_group() -> None:
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"train", "eval", "serve", "tasks show", "tasks sft-data", "sandbox run", "images",
            "node"} <= paths
    assert len(paths) >= 30


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_renders_every_word_of_its_docstring(cli, path: tuple[str, ...], cmd: Any) -> None:
    res = cli([*path, "--help"])
    assert res.code == 0, res.stderr
    shown = _squashed(res.stdout)
    doc = inspect.cleandoc(cmd.help or "").partition("\f")[0]
    assert _squashed(doc) in shown, f"rlvr {' '.join(path)} --help lost words of its docstring"
    for param in cmd.params:
        if getattr(param, "help", None):
            assert _squashed(param.help) in shown, f"{param.name}: {param.help!r}"
    for name, sub in getattr(cmd, "commands", {}).items():  # a group lists each command's whole summary
        first = " ".join(inspect.cleandoc(sub.help or "").split("\n\n")[0].split())
        summary = first[: first.find(". ") + 1] if ". " in first else first
        assert _squashed(summary) in shown, f"{name}: {summary!r}"


def test_markup_in_help_is_text(cli) -> None:
    """The words rich markup used to eat, where the issue found them."""
    assert "[tasks.domains]" in cli(["tasks", "sft-data", "--help"]).stdout
    assert "([agent] command)" in " ".join(cli(["eval", "--help"]).stdout.split())


def test_help_config_piped_is_one_whole_line_per_field(cli) -> None:
    """`rlvr train --help-config | grep activation` printed `train.activation_…`."""
    lines = cli(["train", "--help-config"]).stdout.splitlines()
    assert lines[0].split("\t") == ["key", "type", "default", "meaning"]
    for row in describe_fields():
        assert "\t".join(row) in lines
    assert any(line.startswith("train.activation_checkpointing\t") for line in lines)


def test_piped_lines_are_never_wrapped(cli) -> None:
    res = cli(["tasks", "show", "code:0"])
    assert res.code == 0, res.stderr
    [limits] = [line for line in res.stdout.splitlines() if line.startswith("limits: ")]
    assert "tier: " in limits and "source: " in limits  # one line, however long
    rows = cli(["tasks", "list"]).stdout.splitlines()
    by_name = dict(line.split("\t")[::2] for line in rows[1:])
    listed = {r["name"]: r["description"] for r in json.loads(cli(["tasks", "list", "--json"]).stdout)}
    assert by_name == listed  # every description whole, none cut to the column
