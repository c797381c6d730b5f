"""Verifier proofs: gold scores 1.0 with no flag, negative controls earn 0, and `tasks validate` reports
both."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.loaders import load_task_dir
from rlvr.verify import base
from rlvr.verify.base import VerifyContext
from rlvr.verify.proof import prove, prove_rows
from tests.conftest import write_task

TOML = 'id = "{name}"\ndomain = "proofdemo"\n[verifier]\nkind = "code"\ntests = ["test_h.py"]\n{extra}'
HIDDEN = {"test_h.py": "from m import f\n\n\ndef test_f():\n    assert f(2) == 4\n\n\ndef test_g():\n    "
                       "assert f(3) == 9\n"}
STUB = {"m.py": "def f(x):\n    return 4\n"}


@pytest.fixture
def ctx(pool: SandboxPool) -> VerifyContext:
    return VerifyContext(pool=pool)


def _dir(tmp_path: Path, name: str, solution: dict[str, str], extra: str = "") -> Path:
    return write_task(tmp_path, name, toml=TOML.format(name=name, extra=extra), workspace=STUB, hidden=HIDDEN,
                      solution=solution)


def test_gold_and_negatives_prove(tmp_path: Path, ctx: VerifyContext) -> None:
    results = prove(load_task_dir(_dir(tmp_path, "good", {"m.py": "def f(x):\n    return x * x\n"})), ctx)
    assert [r.name for r in results] == ["gold", "untouched_workspace", "empty_workspace"]
    assert all(r.ok for r in results), results
    assert results[0].score == 1.0 and results[0].flags == ()


def test_wrong_gold_and_leaky_negative_fail(tmp_path: Path, ctx: VerifyContext) -> None:
    bad_gold = prove(load_task_dir(_dir(tmp_path, "badgold", {"m.py": "def f(x):\n    return x + x\n"})), ctx)
    assert not bad_gold[0].ok and "gold scored 0.50" in bad_gold[0].detail
    leaky = prove(load_task_dir(_dir(tmp_path, "leaky", {"m.py": "def f(x):\n    return x * x\n"},
                                     "needs_change = false\n")), ctx)
    untouched = next(r for r in leaky if r.name == "untouched_workspace")
    assert not untouched.ok and "earned 0.50" in untouched.detail


def test_prove_rows_updates_rows_and_survives_broken_domains(tmp_path: Path, ctx: VerifyContext) -> None:
    task = load_task_dir(_dir(tmp_path, "rows", {"m.py": "def f(x):\n    return x * x\n"}))
    rows = [{"task": "rows", "ok": True, "detail": "format ok", "loaded": task},
            {"task": "broken", "ok": False, "detail": "bad toml", "loaded": None}]
    out = prove_rows(rows, ctx)
    assert out[0]["ok"] and "gold 1.0" in out[0]["detail"] and out[1] == rows[1]


def test_tasks_validate_proves_solutions(tmp_path: Path, cli, monkeypatch, pool: SandboxPool) -> None:
    monkeypatch.setattr(base, "_default_pool", pool)
    pack = tmp_path / "pack"
    _dir(pack, "ok1", {"m.py": "def f(x):\n    return x * x\n"})
    _dir(pack, "bad1", {"m.py": "def f(x):\n    return 1\n"})
    r = cli(["tasks", "validate", str(pack), "--json"])
    data = json.loads(r.stdout)
    by = {t["task"]: t for t in data["tasks"]}
    assert r.code == 2 and by["ok1"]["ok"] and not by["bad1"]["ok"] and "gold scored" in by["bad1"]["detail"]
