"""The CLI: every DESIGN.md command exists with help, tasks commands work, bad input exits 2 in one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_task

COMMANDS = [["train"], ["eval"], ["verify"], ["report"], ["failures"], ["query"], ["tasks", "list"],
            ["tasks", "show"], ["tasks", "validate"], ["tasks", "sample"], ["tasks", "profile"],
            ["sandbox", "run"], ["sandbox", "check"], ["sandbox", "bench"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_every_command_has_help(cli, cmd: list[str]) -> None:
    res = cli([*cmd, "--help"])
    assert res.code == 0, res.stderr
    assert "Usage" in res.stdout and len(res.stdout) > 100


def test_help_config_lists_fields(cli) -> None:
    res = cli(["train", "--help-config"])
    assert res.code == 0
    for key in ("train.lr", "sandbox.isolation", "rollout.group_size", "schedule.band_low"):
        assert key in res.stdout


def test_tasks_list_json(cli) -> None:
    res = cli(["tasks", "list", "--json"])
    assert res.code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert isinstance(rows, list)
    for row in rows:
        assert set(row) == {"name", "size", "description"}
        assert row["size"] == "procedural" or isinstance(row["size"], int)


def test_tasks_show(cli, add_task: Path) -> None:
    res = cli(["tasks", "show", str(add_task), "--json"])
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["id"] == "add" and "hidden" not in data and "solution" not in data
    res = cli(["tasks", "show", str(add_task)])
    assert "Write add(a, b)." in res.stdout and "test_visible.py" in res.stdout


def test_tasks_validate_format(cli, tmp_path: Path) -> None:
    write_task(tmp_path, "good", hidden={"test_g.py": "def test(): pass\n"})
    write_task(tmp_path, "bad", toml='id = "bad"\ndomain = "code"\nwhat = 1\n')
    res = cli(["tasks", "validate", str(tmp_path), "--json"])
    data = json.loads(res.stdout)
    assert res.code == 2 and data["ok"] is False  # invalid tasks are bad input (README: exit codes)
    by = {r["task"]: r for r in data["tasks"]}
    assert by["bad"]["ok"] is False and "what" in by["bad"]["detail"]


@pytest.mark.parametrize(("toml", "line"), [
    ('id = 5\ndomain = "code"\n', "task.toml [id]: Input should be a valid string"),
    ('id = "x"\ndomain = "code"\n[verifier]\nvisible_test = ["test_v.py"]\n',
     "task.toml [verifier.visible_test]: unknown field (did you mean 'visible_tests'?)"),
])
def test_validate_and_show_report_a_malformed_task_in_the_same_line(cli, tmp_path: Path, toml: str, line: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr import cli as cli_module

    monkeypatch.setattr(cli_module.out, "_width", 300)  # one table row a line
    d = write_task(tmp_path, "x", toml=toml, hidden={"test_h.py": "def test(): pass\n"},
                   workspace={"test_v.py": "def test(): pass\n"})
    shown = cli(["tasks", "show", str(d)])
    assert shown.code == 2 and line in shown.stderr
    validated = cli(["tasks", "validate", str(d)])
    assert validated.code == 2 and line in validated.stdout  # the table keeps `[field]`
    assert "2 when any is not" in " ".join(cli(["tasks", "validate", "--help"]).stdout.split())


def test_validate_exits_0_when_every_task_is_valid(cli, tmp_path: Path) -> None:
    write_task(tmp_path, "good", workspace={"m.py": "X = 0\n"}, solution={"m.py": "X = 1\n"},
               hidden={"test_g.py": "from m import X\n\n\ndef test_x():\n    assert X == 1\n"})
    res = cli(["tasks", "validate", str(tmp_path), "--json"])
    assert res.code == 0 and json.loads(res.stdout)["ok"] is True, res.stdout


def test_verify_seed_replays_a_verdict(cli, tmp_path: Path) -> None:
    hidden = {"test_h.py": "from m import f\n\n\ndef test_f():\n    assert f(2) == 4\n",
              "gen.py": "def generate(rng):\n    return [rng.randint(0, 10**6)]\n",
              "ref.py": "def f(x):\n    return 2 * x\n"}
    toml = ('id = "dbl"\ndomain = "code"\n[verifier]\n'
            'cases = { generator = "gen.py", reference = "ref.py", entry = "m:f", n = 5 }\n')
    d = write_task(tmp_path, "dbl", toml=toml, workspace={"m.py": "def f(x):\n    return x\n"}, hidden=hidden)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "m.py").write_text("def f(x):\n    return x + x if x % 2 else 4\n")  # right on odd inputs only
    runs = [cli(["verify", str(d), str(ws), "--json", "--seed", str(s)]) for s in (7, 7, 8)]
    assert all(r.code == 0 for r in runs), [r.stderr for r in runs]
    verdicts = [json.loads(r.stdout) for r in runs]
    assert [v["seed"] for v in verdicts] == [7, 7, 8]
    assert verdicts[0]["checks"] == verdicts[1]["checks"] and verdicts[0]["score"] == verdicts[1]["score"]
    assert verdicts[0]["checks"][-1]["detail"] != verdicts[2]["checks"][-1]["detail"]  # other inputs drawn


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["tasks", "show", "/no/such/dir"], "no task"),
        (["tasks", "sample", "no-such-domain-xyz"], "unknown domain"),
        (["tasks", "validate", "/no/such/pack"], "no such file"),
        (["tasks", "validate"], "exactly one"),
        (["train", "/no/such/config.toml"], "no such config file"),
        (["train", "train.lrr=3"], "did you mean 'train.lr'"),
    ],
)
def test_bad_input_exits_2_in_one_line(cli, args: list[str], needle: str) -> None:
    res = cli(args)
    assert res.code == 2
    assert needle in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr


def test_bad_task_toml_via_subprocess(tmp_path: Path) -> None:
    d = write_task(tmp_path, "x", toml='id = "x"\ndomain = "code"\n[limits]\nmax_turns = "many"\n')
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "tasks", "show", str(d)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert "task.toml" in proc.stderr and "limits.max_turns" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
