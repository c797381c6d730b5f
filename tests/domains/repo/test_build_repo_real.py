"""The repo-real domain over a built pack: tasks load with the repo controls, a missing pack is a clear error,
and the built-in build is skipped when its stamp matches."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.domains.repo.build.command import run_build
from rlvr.domains.repo.real import BUILD_VERSION, PROJECTS, STAMP
from rlvr.errors import UserError
from rlvr.tasks import registry
from tests.domains.repo.test_build import factory, make_project, no_env  # noqa: F401  (fixtures)


def test_a_missing_pack_says_how_to_build_it(tmp_path: Path) -> None:
    src = registry.make("repo-real", pack=str(tmp_path / "none"))
    assert src.size == 0
    with pytest.raises(UserError, match="make repo-real"):
        src.get(0)


def test_tasks_of_a_built_pack_load_with_the_repo_controls(tmp_path, factory, no_env) -> None:  # noqa: F811
    proj = make_project(tmp_path / "calc")
    run_build("repo", [str(proj)], tmp_path / "pack", 3, factory, domain="repo-real", json_out=True)
    src = registry.make("repo-real", pack=str(tmp_path / "pack"))
    assert src.size == 3
    task = src.get(0)
    assert task.domain == "repo-real" and task.id == src.id_at(0) and task.limits.max_turns == 20
    negs = src.negatives(task)
    assert {"untouched_workspace", "wrong_answer", "buried_answer", "tampered_tests"} <= set(negs)
    assert negs["wrong_answer"].files[task.metadata["file"]] != task.solution[task.metadata["file"]]
    with pytest.raises(UserError, match="repo-real:0 .. repo-real:2"):
        src.get(3)


def test_the_built_in_pack_is_not_rebuilt_when_its_stamp_matches(tmp_path: Path, capsys) -> None:
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / STAMP).write_text(json.dumps({"want": {"projects": list(PROJECTS), "n": 5,
                                                   "builder": BUILD_VERSION},
                                          "tasks": 17}))

    def no_pool(python: str):
        raise AssertionError("a cached pack must not start a sandbox")
    run_build("repo", ["repo-real"], pack, 5, no_pool)
    assert "up to date: 17 tasks" in capsys.readouterr().out


def test_a_stale_built_in_pack_is_replaced_whole(tmp_path: Path, monkeypatch,
                                                 factory, no_env) -> None:  # noqa: F811
    from rlvr.domains.repo import real as repo_real

    proj = make_project(tmp_path / "calc")
    monkeypatch.setattr(repo_real, "PROJECTS", (str(proj),))
    pack = tmp_path / "pack"
    (pack / "old-task-of-another-build").mkdir(parents=True)
    (pack / STAMP).write_text(json.dumps({"want": {"projects": ["pypi:gone==1"], "n": 9}, "tasks": 1}))
    run_build("repo", ["repo-real"], pack, 2, factory, json_out=True)
    names = sorted(p.name for p in pack.iterdir())
    assert "old-task-of-another-build" not in names and STAMP in names and len(names) == 3, names
    assert json.loads((pack / STAMP).read_text())["want"] == {"projects": [str(proj)], "n": 2,
                                                              "builder": BUILD_VERSION}
    assert not any(p.name.endswith(".building") for p in tmp_path.iterdir())
