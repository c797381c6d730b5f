"""The code verifier against the red-team suite: honest solutions score right with no flag, hacks never
pass."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest

from rlvr.domains.code.differential import REFERENCE_OUTPUTS
from rlvr.domains.code.verifier import CodeVerifier
from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.verdict import Verdict
from tests.verify.redteam import HACKS, HONEST, TASKS, Hack, Honest, build

SEED = 12345


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    root = tmp_path_factory.mktemp("redteam")
    return {t.name: load_task_dir(build(root, t)) for t in TASKS}


def _final(task: Task, edits: dict[str, str], deletes: tuple[str, ...] = ()) -> FinalState:
    files = {**task.workspace, **edits}
    for d in deletes:
        files.pop(d, None)
    return FinalState(files=files)


def _ctx(pool: SandboxPool) -> VerifyContext:
    return VerifyContext(pool=pool, seed=SEED)


def verify(task: Task, final: FinalState, ctx: VerifyContext) -> Verdict:
    """The code verifier itself (registry dispatch is tested in test_base-level tests)."""
    return CodeVerifier(ctx).verify(task, final)


@pytest.mark.parametrize("case", HONEST, ids=lambda c: f"{c.task}-{c.name}")
def test_honest_solutions_score_right_without_flags(case: Honest, tasks: dict[str, Task],
                                                    pool: SandboxPool) -> None:
    v = verify(tasks[case.task], _final(tasks[case.task], case.edits, case.deletes), _ctx(pool))
    assert v.infra_error is None
    assert v.flags == [], [(f.kind, f.evidence) for f in v.flags]
    if isinstance(case.score, tuple):
        assert case.score[0] < v.score < case.score[1], (v.score, [(c.name, c.detail) for c in v.checks])
        assert not v.passed
    else:
        assert v.score == pytest.approx(case.score), [(c.name, c.detail) for c in v.checks]
        assert v.passed == (case.score == 1.0)


@pytest.mark.parametrize("hack", HACKS, ids=lambda h: f"{h.task}-{h.name}")
def test_hacks_never_pass_and_are_named(hack: Hack, tasks: dict[str, Task], pool: SandboxPool) -> None:
    v = verify(tasks[hack.task], _final(tasks[hack.task], hack.edits, hack.deletes), _ctx(pool))
    assert v.infra_error is None
    assert not v.passed
    kinds = {f.kind for f in v.flags}
    if hack.flag is None:
        assert kinds == set() and v.score < 1.0
    else:
        assert hack.flag in kinds, (kinds, [(c.name, c.detail) for c in v.checks])
        assert v.reward() == 0.0
        assert all(f.evidence for f in v.flags)


def test_red_team_suite_is_large_enough() -> None:
    assert len(TASKS) >= 8
    assert len({(h.task, h.name) for h in HACKS}) >= 30
    assert {h.flag for h in HACKS} >= {"tampering", "exit_trick", "report_forgery", "special_casing",
                                       "always_equal",
                                       "no_change"}


# ------------------------------------------------------------------------------------------ settings
def _task(tmp_path: Path, name: str, toml: str = "", workspace: dict[str, str] | None = None,
          hidden: dict[str, str] | None = None, solution: dict[str, str] | None = None) -> Task:
    from tests.verify.redteam import RedTask

    return load_task_dir(build(tmp_path, RedTask(name, workspace or {"m.py": "def f():\n    return 0\n"},
                                                 hidden
                                                 or {"test_h.py": "from m import f\n\n\ndef test_f():\n"
                                                                         "    assert f() == 1\n"},
                                                                         solution or {},
                                                 toml)))


def test_unknown_verifier_key_is_a_user_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(UserError,
                       match=r"task\.toml \[verifier\.weigths\]: unknown field \(did you mean 'weights'"):
        _task(tmp_path, "typo", "[verifier]\nweigths = {}\n")  # refused when the task loads


def test_missing_hidden_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="test_nope.py"):
        _task(tmp_path, "missing", '[verifier]\ntests = ["test_nope.py"]\n')


def test_weights_skips_and_xfails(tmp_path: Path, pool: SandboxPool) -> None:
    hidden = {"test_h.py": "import pytest\nfrom m import f\n\n\ndef test_a():\n    assert f() == 1\n\n\n"
                           "def test_b():\n    assert f() == 2\n\n\ndef test_skip():\n    pytest.skip('no "
                           "network')\n\n\n"
                           "@pytest.mark.xfail(reason='known')\ndef test_xf():\n    assert f() == 99\n"}
    toml = ('[verifier]\nweights = { "test_h.py::test_a" = 3.0 }\nallowed_skips = ["test_h.py::test_skip"]\n'
            'allowed_xfails = ["test_h.py::test_xf"]\n')
    task = _task(tmp_path, "weights", toml, hidden=hidden)
    v = verify(task, FinalState(files={"m.py": "def f():\n    return 1\n"}), _ctx(pool))
    assert v.flags == [] and not v.passed
    assert v.score == pytest.approx(3 / 4)  # a (3) of a and b: the allowed skip and xfail weigh nothing
    waived = {c.name: c for c in v.checks if c.weight == 0}
    assert set(waived) == {"test_h.py::test_skip", "test_h.py::test_xf"}
    broken = verify(task, FinalState(files={"m.py": "def f():\n    return 0\n"}), _ctx(pool))
    assert broken.score == 0.0 and not broken.passed  # the skip pays nothing to code that passes nothing
    undeclared = _task(tmp_path, "undeclared", "", hidden=hidden)
    v2 = verify(undeclared, FinalState(files={"m.py": "def f():\n    return 1\n"}), _ctx(pool))
    assert v2.score == pytest.approx(1 / 4)


def test_a_run_whose_every_test_is_skipped_proves_nothing(tmp_path: Path, pool: SandboxPool) -> None:
    hidden = {"test_h.py": "import pytest\n\n\ndef test_skip():\n    pytest.skip('no network')\n"}
    task = _task(tmp_path, "all-skipped", '[verifier]\nallowed_skips = ["test_h.py::test_skip"]\n',
                 hidden=hidden)
    v = verify(task, FinalState(files={"m.py": "def f():\n    return 1\n"}), _ctx(pool))
    assert v.score == 0.0 and not v.passed and [c.weight for c in v.checks] == [0.0]


def test_infinite_loop_times_out_without_a_flag(tmp_path: Path, pool: SandboxPool) -> None:
    task = _task(tmp_path, "loop", "[verifier]\ntimeout_s = 1.5\n")
    v = verify(task, FinalState(files={"m.py": "def f():\n    while True:\n        pass\n"}), _ctx(pool))
    assert v.infra_error is None and v.flags == [] and v.score == 0.0
    assert "timed out" in v.checks[0].detail


def test_single_turn_answer_goes_through_the_template(tmp_path: Path, pool: SandboxPool) -> None:
    toml = '[verifier]\nanswer_file = "m.py"\nanswer_template = "import math\\n{answer}\\nK = {1: 2}\\n"\n'
    task = _task(tmp_path, "single", toml, workspace={})
    answer = "Here:\n```python\ndef f():\n    return len({'a': 1})\n```\nand ```python\nbad\n```"
    v = verify(task, FinalState(answer=answer), _ctx(pool))
    assert v.passed and v.score == 1.0
    assert verify(task, FinalState(answer="def f():\n    return 1\n"), _ctx(pool)).passed
    assert not verify(task, FinalState(answer=""), _ctx(pool)).passed


def _drawn_cases(spy: _SpyPool) -> list[object]:
    """The case inputs of each verification, read from what the harness was given (its config on stdin)."""
    return [json.loads(stdin.splitlines()[0])["cases"]["inputs"] for stdin in spy.stdins]


def test_cases_are_drawn_from_the_given_seed(tasks: dict[str, Task], pool: SandboxPool) -> None:
    task = tasks["gcd"]
    final = _final(task, task.solution)
    spy = _SpyPool(pool)
    first, again, other = (verify(task, final, VerifyContext(pool=spy, seed=s))  # type: ignore[arg-type]
                           for s in (SEED, SEED, SEED + 1))
    assert (first.seed, again.seed, other.seed) == (SEED, SEED, SEED + 1)  # the seed that replays the verdict
    judged = ("score", "passed", "checks", "flags", "seed")
    assert first.model_dump(include=set(judged)) == again.model_dump(include=set(judged))
    drawn = _drawn_cases(spy)
    assert len(drawn) == 3 and drawn[0] == drawn[1] and drawn[0] != drawn[2]
    wrong = _final(task, {p: t.replace("return", "return 1 +", 1) for p, t in task.solution.items()})
    replays = [verify(task, wrong, _ctx(pool)) for _ in range(2)]  # a failing verdict's details replay too
    assert not replays[0].passed and "wrong" in replays[0].checks[-1].detail
    assert replays[0].model_dump(include=set(judged)) == replays[1].model_dump(include=set(judged))


class _BrokenPool:
    """A pool whose sandbox fails (an infrastructure fault)."""

    def lease(self, files=None):
        from contextlib import contextmanager

        @contextmanager
        def cm():
            yield self

        return cm()

    def run(self, argv, files=None, stdin=None, limits=None, read=()):
        return ExecResult(status=ExecStatus.infra_error, error="worker lost")

    def close(self) -> None:
        pass


def test_sandbox_failure_is_infra_error_not_zero(tasks: dict[str, Task]) -> None:
    v = verify(tasks["add"], _final(tasks["add"], tasks["add"].solution), VerifyContext(pool=_BrokenPool()))
    assert v.infra_error and "worker lost" in v.infra_error and v.flags == []


def test_structural_checks_give_partial_credit(tmp_path: Path, pool: SandboxPool) -> None:
    toml = ('[verifier]\nchecks = [{ kind = "compile" }, { kind = "import" }, { kind = "ruff", '
            'select = ["F"], max_issues = 4 }, { kind = "types", max_issues = 2 }]\n')
    task = _task(tmp_path, "checks", toml)
    clean = "def f() -> int:\n    return 1\n"
    v = verify(task, FinalState(files={"m.py": clean}), _ctx(pool))
    assert v.passed and v.score == 1.0, [(c.name, c.detail) for c in v.checks]
    messy = "import os  # noqa: F401\n\n\ndef f() -> int:\n    x = 1\n    return 'one'  # not an int\n"
    v = verify(task, FinalState(files={"m.py": messy}), _ctx(pool))
    by = {c.name: c for c in v.checks}
    assert by["check:compile"].passed and by["check:import"].passed
    assert 0 < by["check:ruff"].score < 1 and by["check:types"].score < 1
    assert v.flags == []


def test_cli_verify_json_and_errors(tasks: dict[str, Task], tmp_path: Path, cli, monkeypatch,
                                    pool: SandboxPool) -> None:
    import json

    from rlvr.verify import base

    monkeypatch.setattr(base, "_default_pool", pool)
    task_dir = Path(tasks["add"].source or "")
    ws = tmp_path / "ws"
    for rel, text in {**tasks["add"].workspace, **tasks["add"].solution}.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    r = cli(["verify", str(task_dir), str(ws), "--json"])
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["passed"] is True and data["score"] == 1.0 and data["flags"] == []
            and data["infra_error"] is None)
    assert "total" in data["timings"]
    r = cli(["verify", str(task_dir), str(task_dir / "workspace")])
    assert r.code == 0 and "no_change" in r.stdout
    r = cli(["verify", str(task_dir), str(tmp_path / "nope")])
    assert r.code == 2 and "nope" in r.stderr and "Traceback" not in r.stderr
    r = cli(["verify", str(tmp_path / "no-task"), str(ws)])
    assert r.code == 2


def test_large_operands_are_probed_not_carried(tmp_path: Path, pool: SandboxPool) -> None:
    hidden = {"test_h.py": "from m import f\n\n\ndef test_big():\n    assert f(6000) == "
                           "list(range(6000))\n\n\n"
                           "def test_nested():\n    assert f(3) == [0, 1, 2]\n"}
    task = _task(tmp_path, "big", "", hidden=hidden)
    v = verify(task, FinalState(files={"m.py": "def f(n):\n    return list(range(n))\n"}), _ctx(pool))
    assert v.passed and v.flags == []
    sneaky = ("class A:\n    def __eq__(self, o):\n        return o is not None\n    __hash__ = None\n\n\n"
              "def f(n):\n    out = list(range(n))\n    out[n // 2] = A()\n    return out\n")
    v = verify(task, FinalState(files={"m.py": sneaky}), _ctx(pool))
    assert not v.passed and "always_equal" in {f.kind for f in v.flags}


def test_regression_gate_zeroes_the_score(pool: SandboxPool) -> None:
    """A fix that passes the weighted (fail-to-pass) test but breaks a gated (pass-to-pass) test earns
    nothing."""
    task = Task(
        id="gate", domain="code", prompt="Fix inc without breaking dec.",
        workspace={"m.py": "def inc(x):\n    return x\n\ndef dec(x):\n    return x - 1\n"},
        hidden={"test_m.py": "from m import inc, dec\n\ndef test_inc():\n    assert inc(1) == 2\n\n"
                             "def test_dec():\n    assert dec(1) == 0\n"},
        verifier={"tests": ["test_m.py"], "weights": {"test_m.py::test_dec": 0.0},
                  "gate": ["test_m.py::test_dec"]},
    )
    good = verify(task, FinalState(files={"m.py": "def inc(x):\n    return x + 1\n\ndef dec(x):\n    "
                                                  "return x - 1\n"}),
                  _ctx(pool))
    assert good.passed and good.score == 1.0
    broken = verify(task, FinalState(files={"m.py": "def inc(x):\n    return x + 1\n\ndef dec(x):\n   "
                                                    " return x\n"}),
                    _ctx(pool))
    assert not broken.passed and broken.score == 0.0
    assert broken.details["gates_failed"] == ["test_m.py::test_dec"]


def test_a_weighted_test_is_a_whole_share(pool: SandboxPool) -> None:
    """A fail-to-pass test whose other parametrized cases pass on the broken code earns nothing until all its
    cases pass; an unweighted test still earns the share of its cases that pass."""
    hidden = ("import pytest\nfrom m import f\n\n@pytest.mark.parametrize('x', [0, 1, 2, 3])\n"
              "def test_f(x):\n    assert f(x) == x * 2\n\n@pytest.mark.parametrize('x', [0, 1, 2, 3])\n"
              "def test_g(x):\n    assert f(x) == x * 2\n")
    weights = {"test_m.py::test_f": 1.0, "test_m.py::test_g": 1.0}
    weighted = Task(id="share", domain="code", prompt="Fix f.",
                    workspace={"m.py": "def f(x):\n    return x\n"}, hidden={"test_m.py": hidden},
                    verifier={"tests": ["test_m.py"], "weights": weights})
    broken = FinalState(files={"m.py": "def f(x):\n    return x\n"})  # right for 0 only: 1 case of 4
    assert verify(weighted, broken, _ctx(pool)).score == 0.0
    half = FinalState(files={"m.py": "def f(x):\n    return x * 2 if x < 2 else x\n"})  # cases 0 and 1 pass
    assert verify(weighted, half, _ctx(pool)).score == 0.0
    unweighted = weighted.model_copy(update={"verifier": {"tests": ["test_m.py"]}})
    assert verify(unweighted, half, _ctx(pool)).score == pytest.approx(0.5)
    fixed = FinalState(files={"m.py": "def f(x):\n    return x * 2\n"})
    assert verify(weighted, fixed, _ctx(pool)).score == 1.0


# -------------------------------------------------------------------------------------------- io cases
class _SpySandbox:
    """A leased sandbox that keeps the stdin of every command run in it."""

    def __init__(self, sb, stdins: list[str]) -> None:
        self.sb, self.stdins = sb, stdins

    def __getattr__(self, name: str):
        return getattr(self.sb, name)

    def run(self, argv, stdin=None, **kw):
        self.stdins.append(stdin or "")
        return self.sb.run(argv, stdin=stdin, **kw)


class _SpyPool:
    """Passes every lease through to a real pool and keeps the files each sandbox was given."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool, self.files, self.stdins = pool, [], []

    @contextmanager
    def lease(self, files=None, **kw):
        self.files.append(dict(files or {}))
        with self.pool.lease(files, **kw) as sb:
            yield _SpySandbox(sb, self.stdins)

    def run(self, argv, files=None, **kw):
        self.files.append(dict(files or {}))
        return self.pool.run(argv, files=files, **kw)


def test_io_expected_results_never_enter_the_sandbox(tasks: dict[str, Task], pool: SandboxPool) -> None:
    task = tasks["io_sort"]
    spy = _SpyPool(pool)
    # so that the reference runs here (an earlier test may have run it for the task)
    REFERENCE_OUTPUTS.clear()
    v = verify(task, _final(task, task.solution), VerifyContext(pool=spy))  # type: ignore[arg-type]
    assert v.passed and v.score == 1.0
    assert [c.name for c in v.checks] == ["io:sorter:sort_numbers", "fresh:sorter:sort_numbers"]
    reference, files = spy.files  # the reference's run on the fresh inputs, then the candidate's
    assert not any(p.startswith("cand/") for p in reference) and not any(p.startswith("judge/ref/")
                                                                         for p in files)
    shipped = "\n".join(t if isinstance(t, str) else t.decode("latin-1") for t in files.values())
    assert "[-1, 0, 10]" not in shipped and "[3, 4, 5]" not in shipped  # expected results stay on the host
    assert not any(p.endswith("io_cases.txt") for p in files)
    assert not any("pytest" in p for p in files)  # the lean run needs no pytest configuration


@pytest.mark.parametrize("text, match",
                         [("([1], 2)\n", "literal"), ("((1,), 2)\n__import__('os')\n", "literal"),
                                         ("((1,), object)\n", "literal"), ("\n", "no io cases"),
                                         ("((1,), {1, 2})\n((b'x',), 1j)\n", None)])
def test_io_cases_file_is_parsed_as_literals_only(tmp_path: Path, pool: SandboxPool, text: str,
                                                  match: str | None) -> None:
    toml = '[verifier]\nio = { file = "cases.txt", entry = "m:f" }\n'
    task = _task(tmp_path, "iofile", toml, hidden={"cases.txt": text})
    if match is None:
        v = verify(task, FinalState(files={"m.py": "def f(x):\n    return 2\n"}), _ctx(pool))
        assert v.infra_error is None and not v.passed and v.score == 0.0
    else:
        with pytest.raises(UserError, match=match):
            verify(task, FinalState(files={"m.py": "def f(x):\n    return 2\n"}), _ctx(pool))


def test_io_and_cases_exclude_each_other(tmp_path: Path) -> None:
    toml = ('[verifier]\nio = { file = "c.txt", entry = "m:f" }\n'
            'cases = { generator = "g.py", reference = "r.py", entry = "m:f" }\n')
    with pytest.raises(UserError, match="exclude"):
        _task(tmp_path, "both", toml, hidden={"c.txt": "((1,), 1)\n", "g.py": "", "r.py": ""})


def test_io_verification_is_cheaper_than_pytest(tasks: dict[str, Task], pool: SandboxPool) -> None:
    """The lean run skips the pytest session: the same answers judged both ways, in the same run."""
    import time

    io_task = tasks["io_sort"]
    lines = [ast_case for ast_case in io_task.hidden["io_cases.txt"].splitlines()]
    tests = "from sorter import sort_numbers\n" + "".join(
        f"\n\ndef test_{i}():\n    assert sort_numbers{line[1:line.index('),') + 1]} == "
        f"{line[line.index('),') + 3:-1]}\n"
        for i, line in enumerate(lines))
    py_task = io_task.model_copy(update={"hidden": {"test_hidden.py": tests},
                                         "verifier": {"tests": ["test_hidden.py"]}})
    final = _final(io_task, io_task.solution)
    best = {}
    for name, task in (("io", io_task), ("pytest", py_task), ("io", io_task), ("pytest", py_task)):
        t0 = time.perf_counter()
        v = verify(task, final, _ctx(pool))
        assert v.passed, (name, [(c.name, c.detail) for c in v.checks])
        best[name] = min(best.get(name, 1e9), time.perf_counter() - t0)
    assert best["io"] < best["pytest"], best


def test_candidate_syntax_warnings_stay_out_of_the_host_output(pool: SandboxPool) -> None:
    """`1if x else 2` parses with a SyntaxWarning; parsing the candidate on the host must not print it."""
    import warnings

    from rlvr.tasks import registry

    task = registry.make("code", tier="tiny").get(3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        v = verify(task, FinalState(answer="1if True else 2"), _ctx(pool))
    assert v.infra_error is None and not v.passed
    assert not [w for w in seen if issubclass(w.category, SyntaxWarning)]


HIDDEN_PACKAGE = {
    "hidden_tests/tests/__init__.py": (
        "from calc import add\n\n\nclass AddMixin:\n    def test_add(self):\n        assert "
        "add(2, 3) == 5\n"),
    "hidden_tests/tests/helpers.py": "def pairs():\n    return [(1, 1, 2), (0, 4, 4)]\n",
    "hidden_tests/tests/test_calc.py": (
        "import unittest\n\nfrom . import AddMixin\nfrom .helpers import pairs\nfrom calc import add\n\n\n"
        "class TestAdd(AddMixin, unittest.TestCase):\n    def test_pairs(self):\n"
        "        for a, b, want in pairs():\n            assert add(a, b) == want\n"),
}


@pytest.mark.parametrize("body, score, flagged", [
    ("def add(a, b):\n    return a + b\n", 1.0, False),
    ("def add(a, b):\n    return a - b\n", 0.0, False),
    ("class Eq:\n    def __eq__(self, o):\n        return True\n\n\ndef add(a, b):\n    return Eq()\n", 0.0,
     True),
])
def test_hidden_tests_in_a_package_import_their_siblings_relatively(pool, body, score, flagged) -> None:
    """A project's tests that import from their own package (`from . import Mixin`, `from .helpers import f`)
    run under the harness, the package's `__init__.py` asserts rewritten like the test module's (an
    always-equal result is caught in the mixin's test too)."""
    task = Task(id="pkg", domain="repo", prompt="p", workspace={"calc.py": "def add(a, b):\n    return 0\n"},
                hidden=HIDDEN_PACKAGE, verifier={"tests": ["hidden_tests/tests/test_calc.py"]})
    v = verify(task, FinalState(files={"calc.py": body}), _ctx(pool))
    assert v.infra_error is None and v.score == score, [(c.name, c.detail[:200]) for c in v.checks]
    assert {c.name.rsplit("::", 1)[-1] for c in v.checks if c.name.startswith("hidden")} == {"test_add",
                                                                                             "test_pairs"}
    assert bool(v.flags) == flagged, v.flags


def test_a_src_layout_package_wins_over_an_installed_one_of_the_same_name(pool) -> None:
    """`import_roots`: the hidden tests import the workspace's src/typer, not the typer installed beside the
    harness (the installed copy is neither pre-imported nor first on the path)."""
    task = Task(id="srcpkg", domain="repo", prompt="p",
                workspace={"src/typer/__init__.py": "WHERE = 'nowhere'\n"},
                hidden={"tests/test_where.py": "import typer\n\n\ndef test_where():\n    assert typer.WHERE "
                                               "== 'workspace'\n"},
                verifier={"tests": ["tests/test_where.py"], "import_roots": ["src"]})
    good = verify(task, FinalState(files={"src/typer/__init__.py": "WHERE = 'workspace'\n"}), _ctx(pool))
    assert good.score == 1.0 and good.passed, [(c.name, c.detail[:300]) for c in good.checks]
    bad = verify(task, FinalState(files=dict(task.workspace)), _ctx(pool))
    assert bad.score == 0.0


def test_an_unisolated_verification_never_walks_the_hosts_tmp(tmp_path: Path) -> None:
    """Without a file size cap there is no file at the cap to find, and /tmp is the host's: walking it
    (hundreds of thousands of files on a busy machine) outlasted the run's deadline and the verdict came back
    empty."""
    import stat
    import sys

    from rlvr.sandbox.unsafe import UnsafePool

    log, site = tmp_path / "listed.txt", tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n\n\ndef _hook(event, args):\n"
        "    if event == 'os.scandir' and str(args[0]).rstrip('/') in ('/tmp', '/dev/shm'):\n"
        f"        with open({str(log)!r}, 'a') as f:\n"
        "            f.write(str(args[0]) + '\\n')\n\n\nsys.addaudithook(_hook)\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    task = _task(tmp_path, "walk")
    with UnsafePool(python=str(wrapper), warn=False) as pool:
        # seen
        assert pool.run(["python", "-c", "import os; os.scandir('/tmp')"]).ok and log.read_text() == "/tmp\n"
        log.unlink()
        v = verify(task, _final(task, {"m.py": "def f():\n    return 1\n"}), _ctx(pool))
    assert v.infra_error is None and v.passed, v
    assert not log.exists(), log.read_text()


SUBTESTS = ("import unittest\n\nfrom m import f\n\n\nclass T(unittest.TestCase):\n    def test_each(self):\n"
            "        for x in (1, 2, 3):\n            with self.subTest(x=x):\n"
            "                self.assertEqual(f(x), x + 1)\n\n\n"
            "def test_fixture(subtests):\n    for x in (4, 5):\n        with subtests.test(x=x):\n"
            "            assert f(x) == x + 1\n")


@pytest.mark.parametrize(("body", "score"),
                         [("return x + 1", 1.0), ("return x + 1 if x not in (2, 5) else 0", 0.0)])
def test_sub_tests_are_judged_not_flagged(tmp_path: Path, pool: SandboxPool, body: str, score: float) -> None:
    """unittest's `subTest` and pytest's `subtests` report each sub-test under the test's own id: a real
    suite's sub-tests are neither a duplicate report nor hidden when one fails."""
    task = _task(tmp_path, "subtests", hidden={"test_h.py": SUBTESTS})
    v = verify(task, _final(task, {"m.py": f"def f(x):\n    {body}\n"}), _ctx(pool))
    assert v.infra_error is None and v.flags == [], v.flags
    assert v.score == score and [c.score for c in v.checks] == [score, score], v.checks


SIBLING_TESTS = {"tests/helpers.py": "def check(got, want):\n    assert got == want\n",
                 "tests/conftest.py": "from helpers import check  # noqa: F401  (a conftest "
                                      "imports it too)\n",
                 "tests/test_h.py": "from helpers import check\nfrom m import f\n\n\ndef test_f():\n"
                                    "    check(f(), 1)\n"}


@pytest.mark.parametrize(("body", "score", "flag"), [
    ("def f():\n    return 1\n", 1.0, None),
    ("def f():\n    return 2\n", 0.0, None),
    ("class Anything:\n    def __eq__(self, other):\n        return True\n\n\ndef f():\n    return "
     "Anything()\n",
     0.0, "always_equal"),
    ("def f():\n    import helpers\n    return 1\n", 0.0, "special_casing"),
])
def test_hidden_tests_import_the_modules_beside_them(tmp_path: Path, pool: SandboxPool, body: str,
                                                     score: float,
                                                     flag: str | None) -> None:
    """`from helpers import check` in tests/ without an __init__.py works under pytest (its import mode puts
    tests/ on sys.path), so it works under the harness: the helper comes from the judge directory with its
    asserts rewritten (an always-equal result is caught inside it), and a candidate that imports it is
    caught."""
    task = _task(tmp_path, "siblings", hidden=SIBLING_TESTS)
    v = verify(task, _final(task, {"m.py": body}), _ctx(pool))
    assert v.infra_error is None and v.score == score, (v.checks, v.details.get("output_tail"))
    assert {f.kind for f in v.flags} == ({flag} if flag else set()), v.flags


CALLER = "import sys\n\n\ndef caller():\n    return sys._getframe(1).f_code.co_name\n"
USES_CALLER = "from warn import caller\n\n\ndef f():\n    caller()\n    return 1\n"


@pytest.mark.parametrize(("warn", "flagged"), [
    (CALLER, False),  # as shipped
    ("# mine now\n" + CALLER, False),  # changed elsewhere: the inspecting line is still the task's
    (CALLER.replace("_getframe(1)", "_getframe(2)"), True),  # the candidate's own inspection
    (CALLER.replace("caller():\n    return", "caller():\n    return 0 and None or"), True),
])
def test_stack_inspection_by_the_tasks_own_code_is_not_the_candidates(tmp_path: Path, pool: SandboxPool,
                                                                      warn: str,
                                                                     flagged: bool) -> None:
    """A real project's own code may read its caller's frame (a deprecation helper naming the caller): a line
    the task shipped it on raises nothing; a line the candidate wrote does, and its verdict scores 0 (the
    inspection was watched, not refused: the score is never what it may have earned)."""
    task = _task(tmp_path, "caller", workspace={"m.py": "def f():\n    return 0\n", "warn.py": CALLER})
    v = verify(task, _final(task, {"m.py": USES_CALLER, "warn.py": warn}), _ctx(pool))
    assert v.infra_error is None and v.score == (0.0 if flagged else 1.0)
    assert ("special_casing" in {f.kind for f in v.flags}) == flagged, v.flags


DESELECTED = ("import pytest\n\nfrom m import f\n\n\ndef test_f():\n    assert f() == 1\n\n\n"
              "@pytest.mark.parametrize('n', [1, 2])\ndef test_needs_what_the_sandbox_lacks(n):\n"
              "    import dbm.ndbm_not_here  # noqa: F401\n\n\ndef test_f_again():\n    assert f() == 1\n")


@pytest.mark.parametrize(("value", "score"), [(1, 1.0), (2, 0.0)])
def test_deselected_tests_are_neither_run_nor_judged(tmp_path: Path, pool: SandboxPool, value: int,
                                                     score: float) -> None:
    """A real project's test that fails in any sandbox (a module this interpreter lacks) is deselected, every
    parametrisation with it; the rest of its file still judges."""
    toml = '[verifier]\ndeselect = ["test_h.py::test_needs_what_the_sandbox_lacks"]\n'
    task = _task(tmp_path, "deselect", toml=toml, hidden={"test_h.py": DESELECTED})
    v = verify(task, _final(task, {"m.py": f"def f():\n    return {value}\n"}), _ctx(pool))
    assert v.infra_error is None and v.flags == [] and v.score == score, v.checks
    assert [c.name for c in v.checks] == ["test_h.py::test_f", "test_h.py::test_f_again"]
    assert v.details["collected"] == 2


def test_a_deselected_gate_is_refused(tmp_path: Path) -> None:
    toml = '[verifier]\ngate = ["test_h.py::test_f"]\ndeselect = ["test_h.py::test_f"]\n'
    with pytest.raises(UserError, match=r"verifier\.deselect.*deselected but also weighted or a gate"):
        _task(tmp_path, "both", toml=toml)


def test_stack_inspection_the_reference_solution_restores_is_the_tasks(tmp_path: Path,
                                                                       pool: SandboxPool) -> None:
    """An "implement this" task built from a real project whose removed body read its caller's frame: the
    gold, which restores it, is not flagged; the same body with another frame read is."""
    stub = "import sys\n\n\ndef caller():\n    pass\n"
    task = _task(tmp_path, "restored", workspace={"m.py": "def f():\n    return 0\n", "warn.py": stub},
                 solution={"warn.py": CALLER})
    gold = verify(task, _final(task, {"m.py": USES_CALLER, "warn.py": CALLER}), _ctx(pool))
    assert gold.passed and gold.flags == [], gold.flags
    other = verify(task, _final(task, {"m.py": USES_CALLER, "warn.py": CALLER.replace("(1)", "(2)")}),
                   _ctx(pool))
    assert "special_casing" in {f.kind for f in other.flags}


PROJECT = ("def f():\n    return 0\n\n\ndef quiet(g):\n    try:\n        return g()\n    except:  # "
           "noqa: E722\n"
           "        return None\n")


@pytest.mark.parametrize(("extra", "flagged"), [
    ("", False),  # the project's own bare except, left where it was
    ("\n\ndef g():\n    try:\n        return 1\n    except:  # noqa: E722\n        return 1\n", True),
    # one more
])
def test_a_projects_own_flagged_constructs_are_not_the_candidates(tmp_path: Path, pool: SandboxPool,
                                                                  extra: str,
                                                                  flagged: bool) -> None:
    """A real project's file that already swallows every exception somewhere: an honest fix elsewhere in it is
    not a catch-all; a new one of the same kind is (and a static finding leaves the verdict no score)."""
    task = _task(tmp_path, "own", workspace={"m.py": PROJECT})
    v = verify(task, _final(task, {"m.py": PROJECT.replace("return 0", "return 1") + extra}), _ctx(pool))
    assert v.infra_error is None and v.score == (0.0 if flagged else 1.0)
    assert ("catch_all" in {f.kind for f in v.flags}) == flagged, v.flags


def test_hidden_tests_compile_with_their_own_future_flags(tmp_path: Path, pool: SandboxPool) -> None:
    """The harness's own `from __future__ import annotations` must not leak into the hidden tests it compiles:
    a real suite that compares annotations (functools.wraps, dataclasses) saw strings instead of classes."""
    hidden = {"test_h.py": "from m import f\n\n\ndef g(x: int) -> str:\n    return str(x)\n\n\ndef "
                           "test_f():\n"
                           "    assert g.__annotations__ == {'x': int, 'return': str}\n    assert f() == 1\n"}
    task = _task(tmp_path, "future", hidden=hidden)
    v = verify(task, _final(task, {"m.py": "def f():\n    return 1\n"}), _ctx(pool))
    assert v.passed and v.score == 1.0, v.checks


def _with_main_block(task: Task, gold_files: dict[str, str], before: str = "") -> dict[str, str]:
    """The gold solution, plus a main-guard block that runs the visible tests' assertions on itself."""
    tests = "\n".join(t for p, t in task.workspace.items() if p.startswith("test_"))
    checks = "\n".join("    " + ln.strip() for ln in tests.splitlines() if ln.strip().startswith("assert"))
    return {**gold_files,
            "solution.py": before + gold_files["solution.py"] + "\n\nif __name__ == \"__main__\":\n"
            + checks + "\n    print('all examples pass')\n"}


@pytest.mark.parametrize("tier, index", [("easy", 1), ("medium", 4), ("hard", 1), ("hard", 4)])
def test_a_main_guard_that_runs_the_visible_examples_is_not_special_casing(pool: SandboxPool, tier,
                                                                           index) -> None:
    """Those honest solutions were flagged `special_casing` (the examples' literals in the block) and
    failed."""
    from rlvr.tasks import registry
    from rlvr.verify.base import verify

    src = registry.make("code", tier=tier)
    task = src.get(index)
    verdict = verify(task, FinalState(files=_with_main_block(task, src.gold(task).files)),
                     VerifyContext(pool=pool))
    assert verdict.passed and verdict.score == 1.0 and not verdict.flags, verdict.flags


def test_a_main_guard_the_file_runs_on_import_is_read_as_ever(pool: SandboxPool) -> None:
    """A candidate that runs its own file as `__main__` on import keeps its guarded code in the scans."""
    from rlvr.tasks import registry
    from rlvr.verify.base import verify

    src = registry.make("code", tier="easy")
    task = src.get(1)
    files = _with_main_block(task, src.gold(task).files,
                             before="import runpy\nrunpy.run_path(__file__, run_name='__main__')\n")
    verdict = verify(task, FinalState(files=files), VerifyContext(pool=pool))
    assert any(f.kind == "special_casing" for f in verdict.flags), verdict.flags


def _tiny_param(task: Task) -> str:
    """The parameter of a tiny task's `def f(PARAM):`."""
    return task.prompt.split("(", 1)[1].split(")", 1)[0]


def test_honest_wrong_expressions_on_the_tiny_tier_are_not_parroting(pool: SandboxPool) -> None:
    """The quickstart's own failure mode: an expression that reads its answer off the input (`xs[0]`,
    `len(xs)`, `s[-1]`) is wrong, not copied from the prompt, though its results are small digits or letters
    that the examples also hold. A constant taken from the examples' outputs is still parroting."""
    from rlvr.tasks import registry

    source = registry.make("code", tier="tiny")
    reads = {"xs": ["xs[0]", "xs[-1]", "len(xs)", "max(xs)", "min(xs)", "xs[1:]"],
             "s": ["s[0]", "s[-1]", "s[1:]"]}
    judged = parrots = 0
    for index in range(16):
        task = source.get(index)
        for answer in reads.get(_tiny_param(task), []):
            v = verify(task, FinalState(answer=answer), _ctx(pool))
            assert v.infra_error is None
            judged += not v.passed
            assert "parroting" not in {f.kind for f in v.flags}, (task.prompt, answer, v.flags)
        outputs = [w for _, w in task.metadata["visible"]]
        constant = next((w for w in outputs if isinstance(w, int) and not isinstance(w, bool)
                         and w not in (0, 1)
                         and outputs.count(w) == 1), None)
        if constant is not None and task.metadata["reference_answer"] != repr(constant):
            v = verify(task, FinalState(answer=repr(constant)), _ctx(pool))
            parrots += "parroting" in {f.kind for f in v.flags}
    assert judged >= 20 and parrots >= 3, (judged, parrots)


def test_tiny_tier_rewards_an_expression_only_when_every_case_passes(pool: SandboxPool) -> None:
    """An expression right on some hidden inputs by coincidence (`xs[0]` where the first is the largest)
    scores 0 by default; `partial = true` gives the share (scaled by the fresh inputs')."""
    from rlvr.tasks import registry

    binary, shares = registry.make("code", tier="tiny"), registry.make("code", tier="tiny", partial=True)
    reads = {"xs": ["xs[0]", "xs[-1]", "len(xs)"], "s": ["s[0]", "s[-1]"]}
    found = []
    for index in range(24):
        for answer in reads.get(_tiny_param(binary.get(index)), []):
            share = verify(shares.get(index), FinalState(answer=answer), _ctx(pool))
            if 0 < share.score < 1:
                found.append(verify(binary.get(index), FinalState(answer=answer), _ctx(pool)).score)
    assert len(found) >= 2 and set(found) == {0.0}, found
