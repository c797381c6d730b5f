"""A domain's needs (`Domain.needs`: pytest for code) are checked against the sandbox's own interpreter, and a
run that lacks one is refused at start-up in one line, before any episode: a pool on an interpreter without
pytest (a bare venv, made once and cached under .rlvr-cache) used to mask every code episode as an infra
error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr import run
from rlvr.config import load_config
from rlvr.errors import UserError
from rlvr.sandbox import make_pool
from rlvr.tasks import registry
from rlvr.verify.needs import missing, needs_of, require

CACHE = Path(os.environ.get("RLVR_TEST_CACHE", Path(__file__).parents[2] / ".rlvr-cache")) / "bare-venv"


@pytest.fixture(scope="module")
def bare_python() -> str:
    """An interpreter with the standard library only (no pytest), made once."""
    python = CACHE / "bin" / "python"
    if not python.exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", "--clear", str(CACHE)], check=True)
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('pytest'))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "None"
    return str(python)


@pytest.fixture(scope="module")
def bare_pool(bare_python: str):
    with make_pool(python=bare_python, workers=1, warm=(), spares=0) as pool:
        yield pool


def test_domains_declare_what_they_need_to_judge() -> None:
    assert registry.entry("code").needs == ("pytest",) and registry.entry("humaneval").needs == ("pytest",)
    assert needs_of(["code", "math", "no-such-pack"]) == {"code": ("pytest",)}


def test_the_check_asks_the_sandbox_interpreter(bare_pool, pool) -> None:
    assert missing(bare_pool, ["pytest", "json"]) == ["pytest"]
    assert missing(pool, ["pytest", "json"]) == []  # rlvr's own interpreter: pytest is a core dependency
    require(pool, ["code", "math"])
    require(bare_pool, ["math"])  # a domain that needs nothing runs anywhere


def test_a_run_without_pytest_is_refused_in_one_line_before_any_episode(bare_pool, cli, tmp_path,
                                                                          monkeypatch) -> None:
    with pytest.raises(UserError) as exc, run.build(load_config(), policy=False, pool=bare_pool,
                                                    domains={"code"}):
        pytest.fail("the run was built")
    assert "pytest" in str(exc.value) and "code" in str(exc.value) and "\n" not in str(exc.value)
    # through the CLI: exit 2, one line, no episode and no eval directory left behind
    monkeypatch.setattr(run, "open_pool", lambda sandbox, cluster: _Borrowed(bare_pool))
    script = tmp_path / "submit.json"
    script.write_text(json.dumps({"default": ['<tool_call>{"name": "submit"}</tool_call>']}))
    out = tmp_path / "evals"
    res = cli(["eval", "--policy", f"scripted:{script}", "--tasks", "code:2", "--output-dir", str(out)])
    assert res.code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "cannot import pytest" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists() or not any(out.iterdir())


class _Borrowed:
    """The bare pool, handed to a run that closes what it opens (the fixture closes it)."""

    def __init__(self, pool) -> None:
        self._pool = pool

    def __getattr__(self, name: str):
        return getattr(self._pool, name)

    def close(self) -> None:
        pass
