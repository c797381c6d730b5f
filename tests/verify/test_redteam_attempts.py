"""Attempts judged as `rlvr verify` judges them (the final workspace written to disk and read back by its
reader, scored by a Scorer): every attempt is flagged for what it tried and none passes, a flagged verdict's
score is never the trick's reward, and the honest look-alikes are judged unflagged at their merit."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.loaders import read_workspace, refused_links
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scorer
from rlvr.verify.verdict import Verdict
from tests.verify.redteam import TASKS as BASE_TASKS
from tests.verify.redteam import load
from tests.verify.redteam_attempts import ATTEMPTS, LOOKS, TASKS, Attempt, Edits, Look
from tests.verify.redteam_classes import CLASS_TASKS
from tests.verify.redteam_judge import TASKS_NEW

SEED = 4401


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    return load(tmp_path_factory.mktemp("redteam-attempts"), [*BASE_TASKS, *TASKS_NEW, *CLASS_TASKS, *TASKS])


def verify(task: Task, edits: Edits, deletes: tuple[str, ...], pool: SandboxPool, root: Path) -> Verdict:
    """What `rlvr verify TASK WORKSPACE` says of the task's workspace with `edits`."""
    write(task, edits, deletes, root)
    return judge_dir(task, pool, root)


def judge_dir(task: Task, pool: SandboxPool, root: Path) -> Verdict:
    """What `rlvr verify TASK WORKSPACE` says of the workspace directory `root`."""
    final = FinalState(files=read_workspace(root), refused=refused_links(root))
    return Scorer(pool, cache=False).score(task, final, SEED).verdict


def write(task: Task, edits: Edits, deletes: tuple[str, ...], root: Path) -> None:
    """The task's workspace with `edits` (bytes written as bytes), less `deletes`, written under `root`."""
    for rel, text in {**task.workspace, **edits}.items():
        if rel in deletes:
            continue
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)


def test_each_family_has_several_different_attempts() -> None:
    families: dict[str, list[Attempt]] = {}
    for a in ATTEMPTS:
        families.setdefault(a.family, []).append(a)
    assert set(families) == {"inert", "stdlib", "lazy", "params", "parrot", "tamper"}
    for family, attempts in families.items():
        assert len(attempts) >= 5, family
        assert len({a.name for a in attempts}) == len(attempts), family
    assert len(LOOKS) >= 20 and len({(h.task, h.name) for h in LOOKS}) == len(LOOKS)


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=lambda a: f"{a.family}-{a.name}")
def test_every_attempt_is_flagged_and_earns_nothing(attempt: Attempt, tasks: dict[str, Task],
                                                     pool: SandboxPool, tmp_path: Path) -> None:
    v = verify(tasks[attempt.task], attempt.edits, attempt.deletes, pool, tmp_path)
    detail = ([(f.kind, [e.seen[:100] for e in f.evidence[:2]]) for f in v.flags], v.score,
              [(c.name, c.score, c.detail[:100]) for c in v.checks])
    assert v.infra_error is None, detail
    assert v.flags, detail
    assert not v.passed, detail
    # the score is what the work earns with the trick neutralised, or 0: never the trick's reward
    assert v.score == 0.0 or all(f.neutralised for f in v.flags), detail
    assert Scorer(pool).reward(v) == 0.0


@pytest.mark.parametrize("look", LOOKS, ids=lambda h: f"{h.task}-{h.name}")
def test_honest_look_alikes_are_judged_at_their_merit(look: Look, tasks: dict[str, Task], pool: SandboxPool,
                                                      tmp_path: Path) -> None:
    v = verify(tasks[look.task], look.edits, look.deletes, pool, tmp_path)
    assert v.infra_error is None
    assert v.flags == [], [(f.kind, [e.seen for e in f.evidence[:3]]) for f in v.flags]
    detail = [(c.name, c.score, c.detail[:160]) for c in v.checks]
    if isinstance(look.score, tuple):
        assert look.score[0] <= v.score < look.score[1], (v.score, detail)
    else:
        assert v.score == pytest.approx(look.score), detail


def test_a_link_out_of_the_workspace_is_refused_and_flagged_one_inside_is_work(tasks: dict[str, Task],
                                                                              pool: SandboxPool,
                                                                              tmp_path: Path) -> None:
    """`rlvr verify` on a workspace whose module is a link to a fixed copy outside it: the link is never read
    (the stub is what is judged) and the attempt is flagged; a link inside the workspace is read as what it
    leads to, unflagged."""
    import os

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    out_ws, in_ws = tmp_path / "out", tmp_path / "in"
    task = tasks["add"]
    write(task, {}, ("calc.py",), out_ws)
    os.symlink(outside / "calc.py", out_ws / "calc.py")
    v = judge_dir(task, pool, out_ws)
    assert [f.kind for f in v.flags] == ["reaching_out"] and v.flags[0].neutralised and v.score == 0.0
    write(task, {"impl.py": "def add(a, b):\n    return a + b\n"}, ("calc.py",), in_ws)
    os.symlink("impl.py", in_ws / "calc.py")
    v = judge_dir(task, pool, in_ws)
    assert v.flags == [] and v.score == 1.0
