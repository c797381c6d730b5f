"""`rlvr sandbox check` and `rlvr sandbox run` end to end, through the CLI."""
from __future__ import annotations

import json
from pathlib import Path

from rlvr.sandbox.selftest import CHECKS


def test_sandbox_check_passes_every_property(cli) -> None:
    res = cli(["sandbox", "check"])
    assert res.code == 0, res.stdout + res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("PASS", "FAIL"))]
    assert len(lines) == len(CHECKS) and all(ln.startswith("PASS") for ln in lines)


def test_sandbox_run_on_a_copy_of_a_workspace(cli, tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("open('data.txt', 'a').write('more')\nprint(open('data.txt').read())")
    (tmp_path / "data.txt").write_text("orig")
    res = cli(["sandbox", "run", "--workspace", str(tmp_path), "--json", "--", "python", "main.py"])
    assert res.code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["status"] == "ok" and out["stdout"] == "origmore\n"
    assert (tmp_path / "data.txt").read_text() == "orig"  # the original is never modified


def test_sandbox_run_exit_code_is_zero_whatever_the_command_did(cli) -> None:
    res = cli(["sandbox", "run", "--timeout", "0.5", "--", "sh", "-c", "echo out; sleep 5"])
    assert res.code == 0 and "[timeout]" in res.stderr and res.stdout == "out\n"


def test_sandbox_run_bad_input_is_one_line(cli, tmp_path: Path) -> None:
    for args in (["--workspace", str(tmp_path / "nope"), "--", "true"], ["--memory", "1", "--", "true"]):
        res = cli(["sandbox", "run", *args])
        assert res.code == 2 and res.stderr.startswith("error:") and len(res.stderr.strip().splitlines()) == 1
