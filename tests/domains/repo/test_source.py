"""The repo domain: mutation operators, the pack builder, the shipped manifest, determinism, gold 1.0 and
negative controls 0 through the code verifier, partial credit, and bad input."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlvr.domains.repo import mutate as repo_mutate
from rlvr.domains.repo import source as repo
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState
from rlvr.verify.base import VerifyContext


def _ctx() -> VerifyContext:
    """The verifier over plain subprocesses: the material proved here is rlvr's own, and this keeps the
    domain's tests independent of the isolated pool's state."""
    from rlvr.sandbox.unsafe import UnsafePool

    return VerifyContext(pool=UnsafePool(warn=False))

SNIPPET = '''"""Module doc."""


def clamp(x, lo, hi):
    """Limit x to [lo, hi]."""
    # keep this comment
    if x < lo:
        return lo
    y = x - 1
    return min(x, hi) and True
'''


@pytest.mark.parametrize("op, expect", [
    ("flip_comparison", "    if x <= lo:\n"),
    ("off_by_one", "    y = x - 2\n"),
    ("swap_operands", "    y = 1 - x\n"),
    ("wrong_operator", "    y = x + 1\n"),
    ("flip_boolean", "    return min(x, hi) or True\n"),
    ("negate_condition", "    if not x < lo:\n"),
    ("drop_statement", None),
    ("stub_function", "    pass\n"),
])
def test_each_operator_edits_one_place_and_keeps_the_rest(op: str, expect: str | None) -> None:
    [m, *_] = list(repo_mutate.mutants("m.py", SNIPPET, (op,)))
    ast.parse(m.source)
    assert m.source != SNIPPET and m.operator == op and m.site == 0
    if op != "stub_function":
        assert "# keep this comment" in m.source and '"""Limit x to [lo, hi]."""' in m.source
    if expect is None:
        assert "y = x - 1" not in m.source and m.source.count("\n") == SNIPPET.count("\n") - 1
    else:
        assert expect in m.source
    assert repo_mutate.mutant("m.py", SNIPPET, op, 0) == m
    with pytest.raises(KeyError):
        repo_mutate.mutant("m.py", SNIPPET, op, 99)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_pack_builder_keeps_only_mutants_that_break_a_test(tmp_path: Path) -> None:
    _write(tmp_path / "calc", {
        "calc/__init__.py": '"""Calculator."""\n',
        "calc/ops.py": 'def add(a, b):\n    """Sum."""\n    return a + b\n\n\n'
                       'def unused(x):\n    """Not tested."""\n    y = x\n    return y\n',
        "tests/test_ops.py": "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                             "def test_add_zero():\n    assert add(0, 0) == 0\n",
    })
    entries = repo_mutate.build_manifest(projects_dir=tmp_path, show_progress=False)
    assert {(e["operator"], e["line"]) for e in entries} == {("wrong_operator", 3), ("stub_function", 3)}
    wrong = next(e for e in entries if e["operator"] == "wrong_operator")
    assert wrong["fail_to_pass"] == ["tests/test_ops.py::test_add"]
    assert wrong["pass_to_pass"] == ["tests/test_ops.py::test_add_zero"]


def test_pack_builder_refuses_a_project_whose_original_fails(tmp_path: Path) -> None:
    _write(tmp_path / "broken", {"broken/m.py": "X = 1\n",
                                 "tests/test_m.py": "from broken.m import X\n\n\ndef test_x():\n    "
                                                    "assert X == 2\n"})
    with pytest.raises(RuntimeError, match="must pass all its tests"):
        repo_mutate.build_manifest(projects_dir=tmp_path, show_progress=False)


def test_shipped_manifest_is_consistent_with_the_projects() -> None:
    entries = repo.manifest()
    assert len(entries) >= 60
    assert len({e["project"] for e in entries}) == len(repo_mutate.project_names()) >= 3
    assert {e["operator"] for e in entries} >= {"flip_comparison", "off_by_one", "drop_statement",
                                                "stub_function"}
    for e in entries:
        files = repo.project_files(e["project"])
        assert repo_mutate.sha(files[e["file"]]) == e["source_sha"]
        assert e["fail_to_pass"] and set(e["fail_to_pass"]) | set(e["pass_to_pass"]) == set(
            repo_mutate.test_ids(files))


def test_recorded_failures_reproduce_under_pytest() -> None:
    src = registry.make("repo")
    original = repo_mutate.run_tests(repo.project_files("textkit"))
    assert original and all(original.values())
    for t in (src.get(0), src.get(1)):
        got = repo_mutate.run_tests({k: v for k, v in t.workspace.items()})
        assert sorted(k for k, ok in got.items() if not ok) == t.metadata["fail_to_pass"]


def test_tasks_are_determined_by_seed_and_index() -> None:
    a, b, c = registry.make("repo"), registry.make("repo"), registry.make("repo", seed=1)
    assert a.get(5).model_dump() == b.get(5).model_dump()
    assert [a.id_at(i) for i in range(10)] != [c.id_at(i) for i in range(10)]
    assert sorted(a.ids()) == sorted(c.ids()) and len(set(a.ids())) == a.size
    t = a.get(5)
    assert t.multi_turn and t.id == a.id_at(5) and t.source == "repo:0:5"
    changed = [f for f in t.workspace if t.workspace[f] != repo.project_files(t.metadata["project"]).get(f)]
    assert changed == [t.metadata["file"]] and t.solution == {changed[0]: repo.project_files(
        t.metadata["project"])[changed[0]]}
    assert all(p.startswith("hidden_tests/") for p in t.hidden) and not set(t.hidden) & set(t.workspace)
    assert sum(t.verifier["weights"].values()) == len(t.metadata["fail_to_pass"])
    assert all(f in t.prompt for f in t.metadata["fail_to_pass"])


def test_gold_and_negative_controls_through_the_code_verifier() -> None:
    from rlvr.verify.proof import prove

    src, ctx = registry.make("repo", projects=("gridpath",)), _ctx()
    feature = next(i for i in range(src.size) if src.get(i).metadata["operator"] == "stub_function")
    results = prove(src.get(feature), ctx)
    names = {r.name for r in results}
    assert {"gold", "untouched_workspace", "wrong_answer", "buried_answer", "tampered_tests"} <= names
    assert [(r.name, r.detail) for r in results if not r.ok] == []


def test_partial_credit_fixing_one_of_two_failing_tests() -> None:
    from rlvr.verify.base import verify

    src = registry.make("repo", projects=("ledger",))
    # the body of format_amount removed: its own test and the statement tests fail
    i = next(i for i in range(src.size) if src.get(i).metadata["summary"] == "body of format_amount removed")
    t = src.get(i)
    assert len(t.metadata["fail_to_pass"]) >= 2
    half = t.workspace[t.metadata["file"]].replace(  # right for non-negative amounts only
        "    pass\n", "    whole, frac = divmod(cents, 100)\n    return f'{whole:,}.{frac:02d}'\n", 1)
    verdict = verify(t, FinalState(files={**t.workspace, t.metadata["file"]: half}), _ctx())
    assert 0.0 < verdict.score < 1.0 and not verdict.passed


def test_bad_input_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError, match="unknown project"):
        registry.make("repo", projects=("nope",))
    src = registry.make("repo")
    with pytest.raises(UserError, match="repo:0"):
        src.get(src.size)
    e = src._entry(0)
    stale = {**repo.project_files(e["project"]), e["file"]: "changed = True\n"}
    monkeypatch.setattr(repo, "project_files", lambda name: stale)
    with pytest.raises(UserError, match="rebuild"):
        src.get(0)
