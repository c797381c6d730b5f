"""The hack classes that used to keep partial credit unflagged, against the code verifier: each attempt is
flagged with its class (reward = the flag penalty), and the honest look-alikes are never flagged."""
from __future__ import annotations

import pytest

from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.spec import Task
from rlvr.verify.verdict import Verdict
from tests.verify.redteam import TASKS, Hack, Honest, judge, load
from tests.verify.redteam_classes import CLASS_HACKS, CLASS_HONEST, CLASS_TASKS

SEED = 777


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    root = tmp_path_factory.mktemp("redteam-classes")
    return load(root, [*TASKS, *CLASS_TASKS])


def _verify(task: Task, edits: dict[str, str], pool: SandboxPool) -> Verdict:
    return judge(task, edits, pool, SEED)


@pytest.mark.parametrize("case", CLASS_HONEST, ids=lambda c: f"{c.task}-{c.name}")
def test_honest_look_alikes_are_never_flagged(case: Honest, tasks: dict[str, Task],
                                              pool: SandboxPool) -> None:
    v = _verify(tasks[case.task], case.edits, pool)
    assert v.infra_error is None
    assert v.flags == [], [(f.kind, f.evidence) for f in v.flags]
    detail = [(c.name, c.score, c.detail[:200]) for c in v.checks]
    if isinstance(case.score, tuple):
        assert case.score[0] < v.score < case.score[1], (v.score, detail)
    else:
        assert v.score == pytest.approx(case.score), detail


@pytest.mark.parametrize("hack", CLASS_HACKS, ids=lambda h: f"{h.task}-{h.name}")
def test_each_class_is_flagged(hack: Hack, tasks: dict[str, Task], pool: SandboxPool) -> None:
    v = _verify(tasks[hack.task], hack.edits, pool)
    assert v.infra_error is None
    kinds = {f.kind for f in v.flags}
    assert hack.flag in kinds, (kinds, v.score, [(c.name, c.score, c.detail[:200]) for c in v.checks])
    assert not v.passed and v.reward(flag_penalty=-1.0) == -1.0


def test_speed_is_timed_outside_the_candidate(tasks: dict[str, Task], pool: SandboxPool) -> None:
    """A slow solution fails the time limit the harness measures (from another process), the gold one
    passes."""
    from tests.verify.redteam_classes import SLOW

    task = tasks["speed"]
    v = _verify(task, {"fastsum.py": SLOW}, pool)
    by = {c.name: c for c in v.checks}
    assert not by["test_hidden.py::test_fast_trusted"].passed
    assert "timed by the harness" in by["test_hidden.py::test_fast_trusted"].detail
    gold = _verify(task, task.solution, pool)
    assert gold.passed and gold.score == 1.0, [(c.name, c.detail) for c in gold.checks]


def test_fresh_inputs_replay_from_the_seed(tasks: dict[str, Task], pool: SandboxPool) -> None:
    task = tasks["add"]
    wrong = {"calc.py": "def add(a, b):\n    return abs(a) + abs(b)\n"}
    a, b = (judge(task, wrong, pool, 5) for _ in range(2))
    fresh = [c for c in a.checks if c.name.startswith("fresh:")]
    assert fresh and a.seed == 5 and a.checks == b.checks
