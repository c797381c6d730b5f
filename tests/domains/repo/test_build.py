"""The task builder on small local projects in the real sandbox: tasks kept only when a kept test fails and
the rest pass, gold scoring 1 and the untouched workspace 0 under the code verifier, bad projects skipped with
their reason, an unreadable SOURCE one line and exit 2."""
from __future__ import annotations

import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from rlvr.domains.repo.build import build
from rlvr.domains.repo.build.builder import ProjectReport, _stable, read_project
from rlvr.domains.repo.build.runner import SuiteRun, function_id
from rlvr.domains.repo.build.source import resolve
from rlvr.errors import UserError
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.spec import FinalState

CALC = '''"""Small arithmetic helpers."""


def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    """The arithmetic mean of a non-empty list."""
    total = 0
    for x in xs:
        total += x
    return total / len(xs)
'''
TESTS = '''import pytest

from calc.core import clamp, mean


@pytest.mark.parametrize("x, want", [(-5, 0), (5, 5), (50, 10), (0, 0), (10, 10)])
def test_clamp(x, want):
    assert clamp(x, 0, 10) == want


class TestMean:
    def test_mean(self):
        assert mean([1, 2, 3, 6]) == 3

    def test_single(self):
        assert mean([4]) == 4
'''


def make_project(root: Path, tests: str = TESTS, extra: dict[str, str] | None = None) -> Path:
    files = {"calc/__init__.py": "", "calc/core.py": CALC, "tests/test_core.py": tests,
             "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\n', **(extra or {})}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture(scope="module")
def factory():
    """Pools on the host's own interpreter (the project's venv would be made by pip: see test_build_env)."""
    from rlvr.sandbox.pool import BwrapPool

    @contextmanager
    def make(python: str):
        with BwrapPool(workers=2, spares=0) as pool:
            yield pool
    return make


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    """Skip making a venv: the host interpreter already has pytest."""
    import sys

    from rlvr.sandbox import venvs as env

    monkeypatch.setattr(env, "ensure_env", lambda reqs, cache: Path(sys.executable))
    return tmp_path


def test_a_local_project_becomes_verified_tasks(tmp_path, factory, no_env) -> None:
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.verify import VerifyContext, verify

    proj = make_project(tmp_path / "calc")
    rep = build([str(proj)], tmp_path / "pack", factory, n=6, cache=tmp_path / "cache", show_progress=False)
    p = rep.projects[0]
    assert not p.skipped and p.tests_found == 3 and p.tests_kept == 3
    assert sum(p.kept.values()) == rep.tasks == 6 and p.kept.get("implement", 0) >= 1
    assert sum(p.tried.values()) >= 6
    dirs = sorted(d for d in (tmp_path / "pack").iterdir())
    assert len(dirs) == 6 and not any(d.name.startswith(".") for d in dirs)
    task = load_task_dir(dirs[0])
    assert task.workspace["calc/core.py"] != CALC and task.solution == {"calc/core.py": CALC}
    assert set(task.hidden) == {"hidden_tests/tests/test_core.py"}
    f2p = task.metadata["fail_to_pass"]
    assert f2p and all(t.startswith("tests/test_core.py::") for t in f2p)
    for t in f2p:  # named in the issue, never with its code or expected values
        assert t.split("::")[-1] in task.prompt
    assert "== want" not in task.prompt and "[6]" not in task.prompt
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        for d in dirs[:3]:
            t = load_task_dir(d)
            gold = verify(t, FinalState(files={**t.workspace, **(t.solution or {})}), ctx)
            assert gold.score == 1.0 and gold.passed, gold
            untouched = verify(t, FinalState(files=dict(t.workspace)), ctx)
            assert untouched.score == 0.0 and not untouched.passed


def test_a_past_change_in_git_history_is_reverted(tmp_path, factory, no_env) -> None:
    proj = make_project(tmp_path / "g")
    buggy = CALC.replace("return total / len(xs)", "return total // len(xs)")
    (proj / "calc/core.py").write_text(buggy)
    git = ["git", "-C", str(proj), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (proj / "calc/core.py").write_text(CALC)
    (proj / "tests/test_core.py").write_text(TESTS + "\n\ndef test_mean_fraction():\n    assert mean([1, "
                                                     "2]) == 1.5\n")
    subprocess.run([*git, "commit", "-qam", "true division"], check=True)
    rep = build([str(proj)], tmp_path / "pack", factory, n=40, cache=tmp_path / "cache", show_progress=False,
                max_tries=400)
    p = rep.projects[0]
    assert p.tried.get("revert") == 1 and p.kept.get("revert") == 1, p
    revert = [d for d in (tmp_path / "pack").iterdir() if "-revert-" in d.name]
    task = load_task_dir(revert[0])
    assert task.metadata["fail_to_pass"] == ["tests/test_core.py::test_mean_fraction"]
    assert task.workspace["calc/core.py"] == buggy and task.solution == {"calc/core.py": CALC}


@pytest.mark.parametrize("extra, tests, reason", [
    ({}, "", "no tests"),
    ({"calc/_speed.c": "int f(void) { return 1; }\n"}, TESTS, "needs a C compiler"),
    ({}, TESTS.replace("== want", "!= want").replace("== 3", "== 4").replace("== 4\n", "== 5\n"),
     "tests fail before any change"),
])
def test_bad_projects_are_skipped_with_their_reason(tmp_path, factory, no_env, extra, tests, reason) -> None:
    proj = make_project(tmp_path / "bad", tests=tests, extra=extra)
    if not tests:
        (proj / "tests/test_core.py").unlink()
    rep = build([str(proj)], tmp_path / "pack", factory, n=3, cache=tmp_path / "cache", show_progress=False)
    assert reason in rep.projects[0].skipped and rep.tasks == 0
    assert not any((tmp_path / "pack").iterdir())


def test_tests_that_need_the_network_are_left_out(tmp_path, factory, no_env) -> None:
    net = "def test_download():\n    import socket\n    socket.create_connection(('pypi.org', 443), 2)\n"
    proj = make_project(tmp_path / "net", extra={"tests/test_net.py": net})
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False)
    p = rep.projects[0]
    assert (p.tests_found, p.tests_kept, p.failing, p.skipped) == (4, 3, 1, "")
    task = load_task_dir(next((tmp_path / "pack").iterdir()))
    assert task.verifier["tests"] == ["hidden_tests/tests/test_core.py"]  # the unstable file is not judged


def test_a_test_that_fails_in_the_sandbox_is_deselected_and_its_file_still_judges(tmp_path, factory,
                                                                                  no_env) -> None:
    """A real suite's one test that needs what the sandbox lacks (here the network) used to cost its whole
    file; now it alone is left out (`deselect`), and gold and the untouched workspace still score 1 and 0."""
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.verify import VerifyContext, verify

    net = ("\n\ndef test_download():\n    import socket\n    "
           "socket.create_connection(('pypi.org', 443), 2)\n")
    proj = make_project(tmp_path / "net", tests=TESTS + net)
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False)
    p = rep.projects[0]
    assert (p.tests_found, p.tests_kept, p.failing, p.skipped) == (4, 3, 1, "")
    assert p.deselected == ["tests/test_core.py::test_download"]
    task = load_task_dir(next((tmp_path / "pack").iterdir()))
    assert task.verifier["tests"] == ["hidden_tests/tests/test_core.py"]
    assert task.verifier["deselect"] == ["hidden_tests/tests/test_core.py::test_download"]
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        gold = verify(task, FinalState(files={**task.workspace, **(task.solution or {})}), ctx)
        assert gold.passed and gold.score == 1.0, gold
        assert "hidden_tests/tests/test_core.py::test_download" not in {c.name for c in gold.checks}
        assert verify(task, FinalState(files=dict(task.workspace)), ctx).score == 0.0


def test_flaky_and_slow_tests_are_counted_and_left_out() -> None:
    def run(outcomes: dict[str, str], durations: dict[str, float] | None = None) -> SuiteRun:
        return SuiteRun(outcomes, durations or {}, {}, [], "exit_nonzero", "")
    a = {"t/test_a.py::test_1": "passed", "t/test_a.py::test_2": "passed", "t/test_b.py::test_3": "passed",
         "t/test_c.py::test_4": "passed", "t/test_c.py::test_5": "failed"}
    b = {**a, "t/test_a.py::test_2": "failed"}
    rep = ProjectReport("x")
    files, kept = _stable(run(a, {"t/test_b.py::test_3": 5.0}), run(b), rep, slow_s=2.0)
    assert (rep.tests_found, rep.tests_kept, rep.flaky, rep.slow, rep.failing) == (5, 2, 1, 1, 1)
    assert files == ["t/test_a.py", "t/test_c.py"] and kept == {"t/test_a.py::test_1", "t/test_c.py::test_4"}
    # flaky and failing; slow test_b.py
    assert rep.deselected == ["t/test_a.py::test_2", "t/test_c.py::test_5"]
    worse = {**b, "t/test_c.py::test_4": "failed"}
    files, kept = _stable(run(a, {"t/test_b.py::test_3": 5.0}), run(worse), rep, slow_s=2.0)
    assert files == [] and kept == set()  # fewer than half kept: the project's tests fail before any change
    c = {k: "passed" for k in a}
    files, kept = _stable(run(c, {"t/test_b.py::test_3": 5.0}), run(c), rep, slow_s=2.0)
    assert files == ["t/test_a.py", "t/test_c.py"] and len(kept) == 4 and rep.deselected == []
    d = {**c, "t/test_a.py::test_2": "failed"}  # a file keeps its other tests; the flaky one is deselected
    files, kept = _stable(run(c, {"t/test_a.py::test_1": 5.0}), run(d), rep, slow_s=2.0)
    assert files == ["t/test_b.py", "t/test_c.py"] and rep.deselected == []  # test_a.py kept nothing
    files, kept = _stable(run(c), run(d), rep, slow_s=2.0)
    assert files == ["t/test_a.py", "t/test_b.py",
                     "t/test_c.py"] and rep.deselected == ["t/test_a.py::test_2"]
    assert "t/test_a.py::test_2" not in kept and len(kept) == 4


def test_function_ids_fold_parameters() -> None:
    assert function_id("tests/test_a.py::TestX::test_y[3-a]") == "tests/test_a.py::TestX::test_y"
    assert function_id("test_a.py::test_z") == "test_a.py::test_z"


@pytest.mark.parametrize("source, words",
                         [("pypi:", "pypi:NAME==VERSION"), ("/no/such/dir", "not a directory"),
                                           ("pypi:no-such-project-rlvr-xyz==0.0.1", "check the name")])
def test_an_unreadable_source_is_a_user_error(tmp_path, source, words) -> None:
    with pytest.raises(UserError) as exc:
        resolve(source, tmp_path)
    assert words in str(exc.value)


def test_the_cli_exits_2_with_one_line_on_an_unreadable_source(cli, tmp_path) -> None:
    res = cli(["tasks", "build", "repo", str(tmp_path / "missing"), "-o", str(tmp_path / "pack")])
    assert res.code == 2
    lines = [ln for ln in (res.stderr + res.stdout).strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "missing" in lines[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "pack").exists()


def test_read_project_skips_caches_and_binaries(tmp_path) -> None:
    proj = make_project(tmp_path / "p", extra={"calc/__pycache__/x.py": "", "docs/conf.py": "x = 1\n"})
    (proj / "calc/blob.py").write_bytes(b"\xff\xfe\x00")
    files, _native = read_project(proj)
    assert "calc/core.py" in files and "tests/test_core.py" in files
    assert not any("__pycache__" in f or f.startswith("docs/") for f in files) and "calc/blob.py" not in files


def test_the_issue_names_exception_types_never_messages() -> None:
    from rlvr.domains.repo.build.runner import parse

    raw = ('{"t.py::test_a[1]": {"outcome": "failed", "duration": 0.1, "exc": "assert 3 == 4"},'
           ' "t.py::test_b": {"outcome": "failed", "duration": 0.1, "exc": "mod.KeyError"},'
           ' "t.py::test_c": {"outcome": "passed", "duration": 0.1, "exc": ""}}')
    run = parse(raw, "exit_nonzero", "")
    assert run.errors == {"t.py::test_a": "failure", "t.py::test_b": "KeyError"}
    assert run.outcomes == {"t.py::test_a": "failed", "t.py::test_b": "failed", "t.py::test_c": "passed"}


def test_tests_the_verifiers_harness_fails_on_the_original_are_deselected(tmp_path, factory, no_env) -> None:
    other = ("from calc.core import clamp\n\n\ndef test_other():\n    assert clamp(3, 0, 1) == 1\n\n\n"
             "def test_fine():\n    assert clamp(0, 0, 1) == 0\n")
    proj = make_project(tmp_path / "h", extra={"tests/test_other.py": other})
    bad = "hidden_tests/tests/test_other.py::test_other"

    def gold_check(task):
        return {bad} if "hidden_tests/tests/test_other.py" in task.verifier["tests"] and \
            bad not in task.verifier["deselect"] else None
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False,
                gold_check=gold_check)
    p = rep.projects[0]
    assert p.harness_failing == 1 and p.deselected == ["tests/test_other.py::test_other"] and rep.tasks == 2
    task = load_task_dir(next((tmp_path / "pack").iterdir()))
    assert task.verifier["tests"] == ["hidden_tests/tests/test_core.py", "hidden_tests/tests/test_other.py"]
    assert task.verifier["deselect"] == [bad] and bad not in task.verifier["gate"]


def test_files_the_verifiers_harness_fails_on_the_original_are_not_judged(tmp_path, factory, no_env) -> None:
    other = "from calc.core import clamp\n\n\ndef test_other():\n    assert clamp(3, 0, 1) == 1\n"
    proj = make_project(tmp_path / "h", extra={"tests/test_other.py": other})
    seen: list[list[str]] = []

    def gold_check(task):
        seen.append(list(task.verifier["tests"]))
        assert task.workspace == {**task.workspace} and task.verifier["needs_change"] is False
        bad = "hidden_tests/tests/test_other.py"
        return {bad + "::test_other"} if bad in task.verifier["tests"] else None
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False,
                gold_check=gold_check)
    p = rep.projects[0]
    assert p.harness_failing == 1 and p.skipped == "" and rep.tasks == 2
    assert seen == [["hidden_tests/tests/test_core.py"], ["hidden_tests/tests/test_other.py"],
                    ["hidden_tests/tests/test_core.py"]]
    task = load_task_dir(next((tmp_path / "pack").iterdir()))
    assert task.verifier["tests"] == ["hidden_tests/tests/test_core.py"]
    rep = build([str(proj)], tmp_path / "pack2", factory, n=2, cache=tmp_path / "cache", show_progress=False,
                gold_check=lambda task: {"x"})
    assert (rep.projects[0].skipped == "the original does not pass under the verifier's harness"
            and rep.tasks == 0)


def test_a_src_layout_project_is_built_and_judged_from_the_workspaces_src(tmp_path, factory, no_env) -> None:
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.verify import VerifyContext, verify

    proj = tmp_path / "srcproj"
    make_project(proj)
    (proj / "src").mkdir()
    (proj / "calc").rename(proj / "src" / "calc")
    rep = build([str(proj)], tmp_path / "pack", factory, n=3, cache=tmp_path / "cache", show_progress=False)
    p = rep.projects[0]
    assert p.skipped == "" and p.roots == ["src"] and p.tests_kept == 3 and rep.tasks == 3, p
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        for d in sorted((tmp_path / "pack").iterdir()):
            t = load_task_dir(d)
            assert t.verifier["import_roots"] == ["src"] and set(t.solution) <= {"src/calc/core.py"}
            gold = verify(t, FinalState(files={**t.workspace, **(t.solution or {})}), ctx)
            assert gold.score == 1.0 and gold.passed, gold
            untouched = verify(t, FinalState(files=dict(t.workspace)), ctx)
            assert untouched.score == 0.0 and not untouched.passed
        # the fix must be made where the project keeps its code: a fixed copy beside src/ is not what is
        # imported
        t = load_task_dir(sorted((tmp_path / "pack").iterdir())[0])
        moved = {**t.workspace, **{k.removeprefix("src/"): v for k, v in (t.solution or {}).items()}}
        assert verify(t, FinalState(files=moved), ctx).score == 0.0


def test_a_project_whose_tests_need_more_than_pytest_becomes_tasks_judged_in_its_environment(
        tmp_path, monkeypatch) -> None:
    """pytest-mock is not in the test venv: the project's venv has it, the tasks record it as requirements,
    and the verifier (the builder's own gold check included) judges them on that venv's interpreter."""
    from rlvr.commands.tasks import _gold_check
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.verify import VerifyContext, verify

    monkeypatch.setenv("RLVR_ENV_CACHE", str(tmp_path / "envs"))
    mocked = TESTS + (
        "\n\ndef test_mean_of_what_a_reader_returns(mocker):\n"
        "    import calc.core\n"
        "    spy = mocker.spy(calc.core, 'mean')\n"
        "    assert calc.core.mean([2, 4]) == 3 and spy.call_count == 1\n")
    proj = make_project(tmp_path / "deps", tests=mocked, extra={
        "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\n'
                          '[project.optional-dependencies]\ntest = ["pytest-mock==3.14.0"]\n'})

    @contextmanager
    def on_the_projects_venv(python: str):
        with BwrapPool(workers=2, spares=0, python=python) as pool:
            yield pool
    rep = build([str(proj)], tmp_path / "pack", on_the_projects_venv, n=3, cache=tmp_path / "cache",
                show_progress=False, gold_check=_gold_check)
    p = rep.projects[0]
    assert p.skipped == "" and p.harness_failing == 0 and p.tests_kept == 4 and rep.tasks == 3, p
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        for d in sorted((tmp_path / "pack").iterdir()):
            t = load_task_dir(d)
            assert t.requirements == ("pytest", "pytest-mock==3.14.0")
            gold = verify(t, FinalState(files={**t.workspace, **(t.solution or {})}), ctx)
            assert gold.score == 1.0 and gold.passed, gold
            assert verify(t, FinalState(files=dict(t.workspace)), ctx).score == 0.0
            # without its requirements the original fails: the mocker test cannot get its fixture
            bare = t.model_copy(update={"requirements": ()})
            assert not verify(bare, FinalState(files={**t.workspace, **(t.solution or {})}), ctx).passed


def test_a_project_that_reads_its_own_version_at_import_is_built(tmp_path, factory, no_env) -> None:
    """`importlib.metadata.version("calc")` at import: the workspace carries calc's metadata beside its
    package (from pyproject's static name and version here, an sdist's PKG-INFO otherwise), never an installed
    copy."""
    from rlvr.domains.repo.build.builder import dist_metadata
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.verify import VerifyContext, verify

    proj = make_project(tmp_path / "versioned", extra={
        "calc/__init__.py": 'import importlib.metadata\n\n__version__ = importlib.metadata.version("calc")\n',
        "tests/test_version.py": "import calc\n\n\ndef test_version():\n    assert "
                                 "calc.__version__ == '0.1'\n"})
    assert dist_metadata(proj,
                         []) == {"calc-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: "
                                                                "calc\nVersion: 0.1\n"}
    assert dist_metadata(proj, ["src"]).keys() == {"src/calc-0.1.dist-info/METADATA"}
    (proj / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: my.calc\nVersion: 0.1.post1\nSummary: x\n")
    assert list(dist_metadata(proj, [])) == ["my_calc-0.1.post1.dist-info/METADATA"]
    (proj / "PKG-INFO").unlink()
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False)
    p = rep.projects[0]
    assert p.skipped == "" and p.tests_kept == 4 and rep.tasks == 2, p
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        for d in sorted((tmp_path / "pack").iterdir()):
            t = load_task_dir(d)
            assert "calc-0.1.dist-info/METADATA" in t.workspace
            assert verify(t, FinalState(files={**t.workspace, **(t.solution or {})}), ctx).score == 1.0
            assert verify(t, FinalState(files=dict(t.workspace)), ctx).score == 0.0
    # without the metadata the project cannot even be imported: every test fails before any change
    assert dist_metadata(tmp_path / "nowhere", []) == {}


def test_a_single_file_suite_named_test_py_is_found(tmp_path, factory, no_env) -> None:
    """Many projects keep their suite in one `test.py` (unittest style) that pytest's default patterns
    miss."""
    suite = ("import unittest\n\nfrom calc.core import clamp, mean\n\n\nclass CalcTest(unittest.TestCase):\n"
             "    def test_clamp(self):\n        self.assertEqual(clamp(50, 0, 10), 10)\n"
             "        self.assertEqual(clamp(-5, 0, 10), 0)\n\n    def test_mean(self):\n"
             "        self.assertEqual(mean([1, 2, 3, 6]), 3)\n")
    proj = make_project(tmp_path / "one", extra={"test.py": suite})
    (proj / "tests/test_core.py").unlink()
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False)
    p = rep.projects[0]
    assert p.skipped == "" and p.tests_kept == 2 and rep.tasks == 2, p
    task = load_task_dir(next((tmp_path / "pack").iterdir()))
    assert (task.verifier["tests"] == ["hidden_tests/test.py"]
            and task.verifier["visible_tests"] == ["test.py"])
    assert "test.py" in task.protected


UNUSED = '''"""Code no test runs."""


def shout(text):
    """The text in capitals."""
    out = text.upper()
    return out + "!"
'''


def test_candidates_are_made_only_where_the_tests_run(tmp_path, factory, no_env, monkeypatch) -> None:
    """A break in code no kept test reaches (a script, an untested module, a data table) can never make a test
    fail: the builder traces the suite once and draws sites only from the lines it ran."""
    from rlvr.domains.repo.build.runner import run_suite

    proj = make_project(tmp_path / "cov", extra={"calc/unused.py": UNUSED, "bin/tool.py": UNUSED})
    files, _ = read_project(proj)
    with factory("python") as pool:
        run = run_suite(pool, files, ["tests/test_core.py"], 60, trace=True)
    assert run.outcomes and run.covered is not None
    clamp_body = {i for i, ln in enumerate(CALC.splitlines(), 1) if "return lo" in ln or "return hi" in ln}
    assert clamp_body <= run.covered["calc/core.py"]
    # its top level: at import
    assert 1 not in run.covered["calc/core.py"] and 1 in run.imported["calc/core.py"]
    assert "calc/unused.py" not in run.covered and "bin/tool.py" not in run.covered
    from rlvr.domains.repo.build import builder

    tried: set[str] = set()

    def spy(pool, staged, *args, **kw):  # the files each candidate run changed
        tried.update(r for r, t in staged.items() if r in files and files[r] != t)
        return run_suite(pool, staged, *args, **kw)
    monkeypatch.setattr(builder, "run_suite", spy)
    rep = build([str(proj)], tmp_path / "pack", factory, n=40, cache=tmp_path / "cache", show_progress=False,
                max_tries=200)
    p = rep.projects[0]
    assert rep.tasks >= 6 and p.covered_lines > 0, p
    assert tried == {"calc/core.py"}  # nothing in the untested module or the script was even tried
    assert {load_task_dir(d).metadata["file"] for d in (tmp_path / "pack").iterdir()} == {"calc/core.py"}


def test_sites_the_tests_run_come_before_those_run_only_at_import() -> None:
    """A module's rule tables, run once at import, may still be worth breaking (inflection's are), but only
    after every site the tests run: a data table (idna's) seldom makes a test fail."""
    import random

    from rlvr.domains.repo.build import generators

    src = "LIMIT = 3 > 2\n\n\ndef f(x):\n    return x > 1\n"
    sites = generators._sites({"m.py": src}, ("flip_comparison",), random.Random(0), {"m.py": {5}},
                              {"m.py": {1}})
    assert [s[3].start[0] for s in sites] == [5, 1]
    assert [s[3].start[0] for s in generators._sites({"m.py": src}, ("flip_comparison",), random.Random(0),
                                                     {"m.py": {5}})] == [5]



def test_a_pytest_pin_the_harness_cannot_run_on_is_relaxed_and_recorded(tmp_path, factory, no_env) -> None:
    """funcy 2.0 pins `pytest==6.2.5` for its tests: honoured where the verifier's harness runs on it, else
    relaxed (the project built again) and the relaxation recorded in every task's metadata."""
    proj = make_project(tmp_path / "pinned", extra={"test_requirements.txt": "pytest==6.2.5\n"})

    def harness(task):  # the harness fails every test while the old pytest is in the environment
        return {"x"} if any(r.startswith("pytest==6") for r in task.requirements) else None
    rep = build([str(proj)], tmp_path / "pack", factory, n=2, cache=tmp_path / "cache", show_progress=False,
                gold_check=harness)
    p = rep.projects[0]
    assert p.skipped == "" and rep.tasks == 2, p
    assert p.relaxed[0].startswith("pytest==6.2.5 -> pytest") and "pytest>=7" in p.relaxed[0]
    task = load_task_dir(next((tmp_path / "pack").iterdir()))
    assert "pytest==6.2.5" not in task.requirements and task.metadata["relaxed"] == p.relaxed
    # a pin the harness runs on is kept
    kept = build([str(proj)], tmp_path / "pack2", factory, n=1, cache=tmp_path / "cache", show_progress=False,
                 gold_check=lambda task: None)
    assert kept.projects[0].relaxed == [] and "pytest==6.2.5" in kept.projects[0].requirements


def test_harness_pins_are_pytest_pins_whose_markers_apply() -> None:
    from rlvr.domains.repo.build.builder import harness_pins

    reqs = ["pytest", "pytest==6.2.5; python_version>='3.6'", "pytest==3.9.3; python_version<='3.5'",
            "whatever==0.7", "pytest-mock<3"]
    assert harness_pins(reqs) == ["pytest==6.2.5; python_version>='3.6'"]
    assert harness_pins(["pytest>=7"]) == []


def test_a_local_sdist_directory_builds_under_its_pkg_info_name(tmp_path) -> None:
    """An unpacked sdist (PKG-INFO at its root) is the distribution it says, not `DIRNAME-local`."""
    root = make_project(tmp_path / "funcy-2.0-unpacked")
    (root / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: funcy\nVersion: 2.0\nSummary: x\n")
    project = resolve(str(root), tmp_path / "cache")
    assert (project.name, project.version) == ("funcy", "2.0")
    plain = make_project(tmp_path / "plain")
    (plain / "pyproject.toml").unlink()
    local = resolve(str(plain), tmp_path / "cache")
    assert (local.name, local.version) == ("plain", "local")


def test_the_prompt_names_every_file_with_a_failing_test() -> None:
    """funcy's failing test lived in its fifth test file, and the prompt's command named only the first
    four."""
    from rlvr.domains.repo.build.generators import Candidate
    from rlvr.domains.repo.build.prompt import describe

    files = [f"tests/test_{n}.py" for n in ("calc", "colls", "decorators", "flow", "funcs", "seqs")]
    cand = Candidate("mutation", {"funcy/funcs.py": ""}, "funcy/funcs.py", 3, "x")
    prompt = describe("funcy", cand, ["tests/test_funcs.py::test_curry", "tests/test_seqs.py::test_take"], {},
                      files)
    assert "`python -m pytest -q tests/test_funcs.py tests/test_seqs.py`" in prompt
    assert f"`python -m pytest -q {' '.join(files)}`" in prompt


def test_fail_to_pass_tests_are_shares_and_pass_to_pass_tests_gates(tmp_path) -> None:
    """A task as the builder writes it: each fail-to-pass test a share of the score (2 of 4 fixed: 0.5), each
    pass-to-pass test a gate (one broken: 0), and a test the project skips worth nothing either way (the
    broken code earns 0, not the skip's share)."""
    from rlvr.domains.repo.build.builder import write_task
    from rlvr.domains.repo.build.generators import Candidate
    from rlvr.domains.repo.build.source import Project
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.verify import VerifyContext, verify

    code = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(5))
    tests = "import pytest\nfrom m import " + ", ".join(f"f{i}" for i in range(5)) + "\n\n\n" + "".join(
        f"def test_f{i}():\n    assert f{i}() == {i}\n\n\n" for i in range(5)) + \
        "def test_needs_network():\n    pytest.skip('no network')\n"
    broken = code.replace("return 1", "return -1").replace("return 2", "return -2").replace(
        "return 3", "return -3").replace("return 4", "return -4")
    files = {"m.py": code, "tests/test_m.py": tests}
    f2p = [f"tests/test_m.py::test_f{i}" for i in (1, 2, 3, 4)]
    cand = Candidate("mutation", {"m.py": broken}, "m.py", 2, "negated", operator="negate", site=0)
    run = SuiteRun({}, {}, {}, [], "exit_nonzero", "")
    rep = ProjectReport("local", skips=["tests/test_m.py::test_needs_network"])
    d = write_task(tmp_path, Project("m", "1", tmp_path, False), files, cand, ["tests/test_m.py"], f2p,
                   {*f2p, "tests/test_m.py::test_f0"}, run, "repo", rep, ["pytest"])
    task = load_task_dir(d)
    assert task.verifier["gate"] == ["hidden_tests/tests/test_m.py::test_f0"]
    half = broken.replace("return -1", "return 1").replace("return -2", "return 2")
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        scores = [verify(task, FinalState(files={**task.workspace, "m.py": text}), ctx).score
                  for text in (code, half, broken, half.replace("return 0", "return 7"))]
    assert scores == [1.0, 0.5, 0.0, 0.0]
