"""What the build report says about a project's environment and its suite: pins relaxed so the environment
builds (in the table and the JSON), and a suite that cannot be collected skipped quoting its error."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from rlvr.domains.repo.build import build
from rlvr.domains.repo.build.command import run_build
from rlvr.domains.repo.build.runner import SuiteRun, collection_error
from rlvr.sandbox import venvs
from rlvr.tasks.loaders import load_task_dir
from tests.domains.repo.test_build import TESTS, factory, make_project, no_env  # noqa: F401  (fixtures)


@pytest.mark.parametrize("where", ["tests/test_core.py", "tests/conftest.py"])
def test_a_suite_that_cannot_be_collected_is_skipped_quoting_the_error(tmp_path, where,
                                                                       factory, no_env) -> None:  # noqa: F811
    """A test module (or a conftest, which stops pytest before any report) importing a package the environment
    lacks: the skip reason quotes the error's last line, not only "0 of 0 tests pass"."""
    proj = make_project(tmp_path / "nodeps", extra={where: "import attr_not_installed_xyz\n" + (
        TESTS if where == "tests/test_core.py" else "")})
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False)
    p = rep.projects[0]
    assert p.skipped.startswith("tests fail before any change") and rep.tasks == 0, p
    assert p.skipped.endswith("ModuleNotFoundError: No module named 'attr_not_installed_xyz'"), p.skipped


def test_the_collection_error_is_the_last_line_of_pytests_output() -> None:
    def run(tail: str, message: str = "") -> SuiteRun:
        return SuiteRun({}, {}, {}, [], "exit_nonzero", tail, collect_message=message)
    conftest = ("ImportError while loading conftest '/w/tests/conftest.py'.\ntests/conftest.py:1: "
                "in <module>\n"
                "    import attr\nE   ModuleNotFoundError: No module named 'attr'\n")
    assert collection_error(run(conftest)) == "ModuleNotFoundError: No module named 'attr'"
    summary = ("==== short test summary info ====\n"
               "ERROR tests/test_a.py - ImportError: cannot import name 'x'\n"
               "!!!! Interrupted: 1 error during collection !!!!\n1 error in 0.05s\n")
    assert collection_error(run(summary)) == "ImportError: cannot import name 'x'"
    assert collection_error(run("ERROR: file or directory not found: t.py\n\nno tests ran in 0.01s\n")) == \
        "ERROR: file or directory not found: t.py"
    assert collection_error(run("3 passed in 0.1s\n")) == ""
    assert collection_error(run("!!!! Interrupted: 1 error during collection !!!!\n1 error in 0.05s\n")) == ""
    assert collection_error(run(conftest,
                                message="SyntaxError: invalid syntax")) == "SyntaxError: invalid syntax"


def test_a_pin_that_does_not_install_is_relaxed_and_reported(tmp_path, factory,  # noqa: F811
                                                             monkeypatch) -> None:
    """The project pins a package that does not install on this Python: the environment is built with the pin
    relaxed, the tasks require the relaxed set, and the report (table and JSON) says what was relaxed."""
    built: list[list[str]] = []

    def fake(reqs, cache):
        built.append(list(reqs))
        if "oldlib==0.1" in reqs:
            raise venvs.EnvError("the environment does not build: ERROR: No matching distribution found for "
                                 "oldlib==0.1")
        return Path(sys.executable)
    monkeypatch.setattr(venvs, "ensure_env", fake)
    proj = make_project(tmp_path / "pinned", extra={
        "tox.ini": "[testenv]\ndeps = -r{toxinidir}/requirements/test.txt\n",
        "requirements/test.txt": "oldlib==0.1\n"})
    console = Console(file=io.StringIO(), width=300)
    rep = run_build("repo", [str(proj)], tmp_path / "pack", 2, factory, console=console, cache=tmp_path / "c")
    p = rep.projects[0]
    assert p.relaxed == ["oldlib==0.1 -> oldlib"] and p.requirements == ["oldlib",
                                                                         "pytest"] and rep.tasks == 2, p
    assert built == [["oldlib==0.1", "pytest"], ["oldlib", "pytest"]]
    assert "relaxed oldlib==0.1 -> oldlib" in console.file.getvalue()
    assert all(load_task_dir(d).requirements == ("oldlib", "pytest") for d in (tmp_path / "pack").iterdir())
    console = Console(file=io.StringIO(), width=300)
    run_build("repo", [str(proj)], tmp_path / "pack2", 1, factory, json_out=True, console=console,
              cache=tmp_path / "c")
    assert json.loads(console.file.getvalue())["projects"][0]["relaxed"] == ["oldlib==0.1 -> oldlib"]
