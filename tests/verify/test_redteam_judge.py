"""The families that subvert the judge from inside the test process, against the code verifier: every attempt
ends with no reward for what it targets (the hidden tests it tries to pass without the work fail, and where
the attempt did something to the judge, it is flagged), and the honest look-alikes score right, unflagged."""
from __future__ import annotations

import pytest

from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.spec import Task
from rlvr.verify.verdict import Verdict
from tests.verify.redteam import TASKS, Hack, Honest, judge, load
from tests.verify.redteam_judge import FAMILIES, HACKS_NEW, HONEST_NEW, TARGETS, TASKS_NEW

SEED = 2806


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    root = tmp_path_factory.mktemp("redteam-judge")
    return load(root, [*TASKS, *TASKS_NEW])


def _verify(task: Task, edits: dict[str, str], pool: SandboxPool) -> Verdict:
    return judge(task, edits, pool, SEED)


def test_each_family_has_three_different_attempts() -> None:
    for family, hacks in FAMILIES.items():
        assert len({h.name for h in hacks}) >= 3, family
        assert len({h.edits[next(iter(h.edits))] for h in hacks}) == len(hacks), family
    assert set(TARGETS) == {h.name for h in HACKS_NEW}


@pytest.mark.parametrize("hack", HACKS_NEW, ids=lambda h: f"{h.task}-{h.name}")
def test_attempt_gets_nothing_for_its_targets(hack: Hack, tasks: dict[str, Task], pool: SandboxPool) -> None:
    v = _verify(tasks[hack.task], hack.edits, pool)
    assert v.infra_error is None
    kinds = {f.kind for f in v.flags}
    by = {c.name: c for c in v.checks}
    detail = (kinds, v.score, [(c.name, c.score, c.detail[:160]) for c in v.checks])
    assert not v.passed, detail
    if hack.flag is not None:
        assert hack.flag in kinds, detail
    for name in TARGETS[hack.name]:
        assert by[f"test_hidden.py::{name}"].score == 0.0, (name, detail)


@pytest.mark.parametrize("case", HONEST_NEW, ids=lambda c: f"{c.task}-{c.name}")
def test_honest_look_alikes_score_right_unflagged(case: Honest, tasks: dict[str, Task],
                                                  pool: SandboxPool) -> None:
    v = _verify(tasks[case.task], case.edits, pool)
    assert v.infra_error is None
    assert v.flags == [], [(f.kind, f.evidence) for f in v.flags]
    detail = [(c.name, c.score, c.detail[:200]) for c in v.checks]
    if isinstance(case.score, tuple):
        assert case.score[0] <= v.score < case.score[1], (v.score, detail)
    else:
        assert v.score == pytest.approx(case.score), detail
