"""The differential check's pool of fresh inputs and the reference outputs kept per input: a task's reference
runs once for its pool, and a verdict is the same whether its reference outputs were known or computed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.domains.code import differential
from rlvr.domains.code.harness import CASES
from rlvr.domains.code.verifier import CodeVerifier
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from tests.verify.redteam import TASKS, build

JUDGED = {"score", "passed", "checks", "flags", "seed"}


class _CountingPool:
    """A real pool that records the inputs of every reference run (the case drawer's config on stdin)."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool, self.reference_inputs = pool, []

    def lease(self, files=None, **kw):
        return self.pool.lease(files, **kw)

    def run(self, argv, files=None, stdin=None, **kw):
        if argv[-1].endswith(CASES):
            cfg = json.loads(stdin.splitlines()[0])
            self.reference_inputs.append(cfg["inputs"] + cfg["extra"])
        return self.pool.run(argv, files=files, stdin=stdin, **kw)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    root = tmp_path_factory.mktemp("differential")
    return {t.name: load_task_dir(build(root, t)) for t in TASKS if t.name in ("add", "io_sort")}


@pytest.fixture(autouse=True)
def _no_known_outputs():
    differential.REFERENCE_OUTPUTS.clear()
    yield
    differential.REFERENCE_OUTPUTS.clear()


def _verify(task: Task, files: dict[str, str], pool, seed: int):
    return CodeVerifier(VerifyContext(pool=pool, seed=seed)).verify(task,
                                                                    FinalState(files={**task.workspace,
                                                                                      **files}))


def test_a_group_runs_the_reference_once(tasks: dict[str, Task], pool: SandboxPool) -> None:
    task = tasks["io_sort"]
    spy = _CountingPool(pool)
    verdicts = [_verify(task, task.solution, spy, seed) for seed in range(8)]  # eight samples, eight seeds
    assert all(v.passed for v in verdicts)
    assert len(spy.reference_inputs) == 1  # the first verification's inputs; the rest were known
    pool_size = differential.POOL_FACTOR * 8
    assert len(spy.reference_inputs[0]) == pool_size  # the whole pool, once
    judged = [json.dumps(c.model_dump()) for v in verdicts for c in v.checks if c.name.startswith("fresh:")]
    assert len(judged) == 8
    # each verification judges its own share of the task's pool: the seeds take different inputs from it
    plans = [differential.prepare(task, _settings(task), task.solution, task.solution, None, s)
             for s in range(8)]
    assert len({json.dumps(p.fresh) for p in plans}) > 1
    assert all(len(p.fresh) == 8 for p in plans)
    drawn = {json.dumps(a) for p in plans for a in p.fresh}
    assert 8 < len(drawn) <= pool_size


def _settings(task: Task):
    from rlvr.domains.code.settings import CodeSettings
    from rlvr.verify.base import settings_of
    return settings_of(task, CodeSettings)


def test_a_verdict_is_the_same_with_known_and_computed_outputs(tasks: dict[str, Task],
                                                               pool: SandboxPool) -> None:
    task = tasks["io_sort"]
    partial = {"sorter.py": "def sort_numbers(nums):\n    return list(nums)\n"}
    for seed in (1, 2, 3):
        differential.REFERENCE_OUTPUTS.clear()
        computed = _verify(task, partial, pool, seed)
        known = _verify(task, partial, pool, seed)
        assert computed.model_dump(include=JUDGED) == known.model_dump(include=JUDGED)
        assert 0 < computed.score < 1


def test_only_inputs_the_reference_has_not_answered_are_run(tasks: dict[str, Task],
                                                            pool: SandboxPool) -> None:
    task = tasks["add"]
    spy = _CountingPool(pool)
    assert _verify(task, task.solution, spy, 0).passed
    table = {"calc.py": "def add(a, b):\n    if (a, b) == (1234, 4321):\n        return 5555\n"
                        "    if (a, b) == (99, 1):\n        return 100\n    return a + b\n"}
    v = _verify(task, table, spy, 0)  # the same fresh inputs, plus the candidate's literal keys as probes
    assert v.passed, [(c.name, c.detail) for c in v.checks]
    assert len(spy.reference_inputs) == 2
    first, second = spy.reference_inputs
    assert not set(map(json.dumps, first)) & set(map(json.dumps, second))  # the known ones were not run again
    assert [1234, 4321] in second and [99, 1] in second


def test_another_reference_is_another_entry(tasks: dict[str, Task], pool: SandboxPool) -> None:
    task = tasks["add"]
    spy = _CountingPool(pool)
    _verify(task, task.solution, spy, 0)
    twisted = task.model_copy(update={"solution": {"calc.py": "def add(a, b):\n    return a + b + 1\n"}})
    v = _verify(twisted, task.solution, spy, 0)  # the same inputs, a reference that answers otherwise
    assert len(spy.reference_inputs) == 2 and spy.reference_inputs[0] == spy.reference_inputs[1]
    fresh = next(c for c in v.checks if c.name.startswith("fresh:"))
    assert fresh.score == 0.0


class _FailingReferencePool(_CountingPool):
    """The reference's sandbox fails once (an infrastructure fault), then works."""

    def __init__(self, pool: SandboxPool) -> None:
        super().__init__(pool)
        self.failed = False

    def run(self, argv, files=None, stdin=None, **kw):
        if argv[-1].endswith(CASES) and not self.failed:
            from rlvr.sandbox.result import ExecResult, ExecStatus
            self.failed = True
            return ExecResult(status=ExecStatus.infra_error, error="worker lost")
        return super().run(argv, files=files, stdin=stdin, **kw)


def test_a_failed_reference_run_is_not_kept(tasks: dict[str, Task], pool: SandboxPool,
                                            tmp_path: Path) -> None:
    task = tasks["io_sort"]
    spy = _FailingReferencePool(pool)
    lost = _verify(task, task.solution, spy, 0)
    assert lost.infra_error and "worker lost" in lost.infra_error
    again = _verify(task, task.solution, spy, 0)
    assert again.passed and len(spy.reference_inputs) == 1  # run for real the second time: nothing was kept


def test_known_references_are_bounded() -> None:
    cache = differential.ReferenceCache(max_references=2)
    for k in ("a", "b", "c"):
        cache.put(k, {"[1]": 1})
    assert cache.known("a", ["[1]"]) == {} and cache.known("c", ["[1]"]) == {"[1]": 1}
    cache.known("b", ["[1]"])  # b is used: d evicts c, the least recently used
    cache.put("d", {"[2]": 2})
    assert cache.known("c", ["[1]"]) == {} and cache.known("b", ["[1]"]) == {"[1]": 1}


class _Hidden:
    """A real pool that does not say which interpreter it runs: the verifier cannot skip the sandbox."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool, self.leases = pool, 0

    def lease(self, files=None, **kw):
        self.leases += 1
        return self.pool.lease(files, **kw)

    def run(self, *a, **kw):
        return self.pool.run(*a, **kw)


BROKEN = {
    "unclosed": "def sort_numbers(nums):\n    return sorted(nums\n",
    "indentation": "def sort_numbers(nums):\nreturn sorted(nums)\n",
    "tabs": "def sort_numbers(nums):\n\tif nums:\n        return sorted(nums)\n\treturn []\n",
    "return_outside": "return sorted(nums)\n",
    "future_import_late": "x = 1\nfrom __future__ import annotations\ndef sort_numbers(nums):\n    return "
                          "sorted(nums)\n",
    "coding_cookie": "# -*- coding: latin-1 -*-\ndef sort_numbers(nums):\n    return 'caf\xe9' +\n",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_an_entry_that_does_not_compile_is_judged_on_the_host_as_the_sandbox_would(
        name: str, tasks: dict[str, Task], pool: SandboxPool) -> None:
    task = tasks["io_sort"]
    files = {"sorter.py": BROKEN[name]}
    hidden = _Hidden(pool)
    host = _verify(task, files, _CountingLeases(pool), 7)
    sandboxed = _verify(task, files, hidden, 7)
    assert hidden.leases == 1  # the sandbox judged it
    assert host.model_dump(include=JUDGED) == sandboxed.model_dump(include=JUDGED)
    assert host.score == 0.0 and not host.passed and "Error" in host.checks[0].detail


class _CountingLeases(_Hidden):
    """A real pool, counted, that says which interpreter it runs."""

    @property
    def python(self) -> str:
        return self.pool.python


def test_only_a_module_that_cannot_compile_skips_the_sandbox(tasks: dict[str, Task],
                                                             pool: SandboxPool) -> None:
    task = tasks["io_sort"]
    counted = _CountingLeases(pool)
    _verify(task, {"sorter.py": BROKEN["unclosed"]}, counted, 1)
    assert counted.leases == 0
    # compiles, fails when run: the sandbox's
    for files in ({"sorter.py": "raise ImportError('at import')\n"},
                  {"sorter.py": BROKEN["unclosed"],
                   "sorter/__init__.py": "def sort_numbers(n):\n    return sorted(n)\n"},
                  {"sorter.py": BROKEN["unclosed"], "sorter.cpython-311-x86_64-linux-gnu.so": b"\x7fELF"}):
        before = counted.leases
        v = _verify(task, files, counted, 1)
        assert counted.leases == before + 1, files
        assert v.infra_error is None
    package = _verify(task, {"sorter.py": BROKEN["unclosed"],
                             "sorter/__init__.py": "def sort_numbers(n):\n    return sorted(n)\n"}, counted,
                             1)
    assert package.passed  # the package is what `import sorter` finds, not the broken module beside it
