"""Tasks SPEC strings and task lookup."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import ADD_HIDDEN, write_task
from tests.tasks.test_registry import CountConfig, CountSource

from rlvr.errors import UserError
from rlvr.tasks import registry, selection
from rlvr.tasks.domain import Domain


@pytest.fixture(autouse=True)
def counting():
    registry.register(Domain("counting", CountSource, CountConfig, description="Say the next number."))
    yield
    registry.unregister("counting")


def test_domain_with_size() -> None:
    (sel,) = selection.parse("counting:4")
    assert sel.n == 4 and len(sel.tasks()) == 4


def test_several_parts(tmp_path: Path) -> None:
    write_task(tmp_path / "pack", "a", hidden=ADD_HIDDEN)
    write_task(tmp_path / "pack", "b", hidden=ADD_HIDDEN)
    jl = tmp_path / "m.jsonl"
    jl.write_text("\n".join(json.dumps({"domain": "math", "prompt": f"{i}?", "answer": i}) for i in range(5)))
    tasks = selection.resolve(f"counting:2,{tmp_path / 'pack'},{jl}:3")
    assert [t.domain for t in tasks] == ["counting"] * 2 + ["code"] * 2 + ["math"] * 3
    # deterministic for a seed
    assert [t.id for t in selection.resolve(f"{jl}:3", seed=1)] == [t.id
                                                                    for t in selection.resolve(f"{jl}:3",
                                                                                               seed=1)]


def test_procedural_needs_size() -> None:
    (sel,) = selection.parse("counting")
    with pytest.raises(UserError, match="needs a sample size"):
        sel.tasks()


@pytest.mark.parametrize(("spec", "needle"), [("", "empty tasks spec"), ("countin:3", "did you mean"),
                                               ("./nope/pack", "no such file"), ("counting:0", "positive")])
def test_bad_specs(spec: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        selection.parse(spec)


def test_lookup(add_task: Path) -> None:
    assert selection.lookup("counting:7").answer == "8"
    assert selection.lookup(str(add_task)).id == "add"
    assert selection.lookup(f"{add_task.parent}/add").id == "add"
    with pytest.raises(UserError, match="no task"):
        selection.lookup("nothing-here")
