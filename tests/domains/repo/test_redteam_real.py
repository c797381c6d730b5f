"""Cheats an agent with a bash tool would try in a real repository, and honest work beside them, on tasks the
builder makes from real projects (funcy, pathspec): run through the env's bash tool in the task's own
environment, judged as the env hands the final workspace to the verifier. No cheat passes and every one is
flagged; the honest work is judged unflagged at its merit (fail-to-pass tests are shares of the score).

Marked `repo_real` (`make test-repo-real`): the pack is built from the projects' PyPI sdists once
(`$RLVR_REPO_HACKS_PACK`, default `.rlvr-cache/repo-hacks/build-N`, N the builder's BUILD_VERSION, so a
builder change rebuilds it), with their environments."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr.envs.env import Env
from rlvr.envs.messages import Message, ToolCall
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scorer
from rlvr.verify.verdict import Verdict
from tests.domains.repo.redteam_real import CHEATS, CONTROLS, PICK, Cheat, Control

pytestmark = pytest.mark.repo_real
PROJECTS = ("pypi:funcy==2.0", "pypi:pathspec==1.1.1")


@pytest.fixture(scope="module")
def pool() -> Iterator[object]:
    from rlvr.sandbox import make_pool

    p = make_pool(workers=2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    """The suite's tasks from the pack, built the way `rlvr tasks build repo` builds it (the code verifier
    proves each project's original) when it is not there yet."""
    import io

    from rich.console import Console

    from rlvr.commands.tasks import _gold_check
    from rlvr.domains.repo.build.command import run_build
    from rlvr.domains.repo.real import BUILD_VERSION
    from rlvr.sandbox import make_pool

    pack = Path(os.environ.get("RLVR_REPO_HACKS_PACK", f".rlvr-cache/repo-hacks/build-{BUILD_VERSION}"))
    if not pack.is_dir() or not any(pack.iterdir()):
        run_build("repo", list(PROJECTS), pack, 8,
                  lambda python: make_pool(python=python, workers=2, spares=0), domain="repo-real",
                  json_out=True, console=Console(file=io.StringIO()), gold_check=_gold_check)
    found = [load_task_dir(d) for d in sorted(pack.iterdir()) if (d / "task.toml").is_file()]
    return {name: next(t for t in found if (t.metadata.get("project"), t.metadata.get("file"),
                                             t.metadata.get("summary")) == pick)
            for name, pick in PICK.items()}


def episode(task: Task, commands: list[str], pool: object) -> tuple[FinalState, list[str]]:
    """The commands as bash tool calls of one episode; (the final state the env hands over, the tool
    outputs)."""
    env = Env(pool)
    env.reset(task)
    outputs = []
    try:
        for c in commands:
            step = env.step(Message(role="assistant", content="",
                                    tool_calls=[ToolCall(name="bash", arguments={"command": c})]))
            outputs += [m.content for m in step.messages]
        return env.final_state(), outputs
    finally:
        env.close()


def judge(task: Task, commands: list[str], pool: object) -> tuple[Verdict, list[str]]:
    final, outputs = episode(task, commands, pool)
    return Scorer(pool, cache=False).score(task, final, 0).verdict, outputs


@pytest.mark.parametrize("cheat", CHEATS, ids=lambda c: f"{c.task}-{c.name}")
def test_no_cheat_passes_and_every_one_is_flagged(cheat: Cheat, tasks: dict[str, Task], pool: object) -> None:
    v, outputs = judge(tasks[cheat.task], cheat.commands(tasks[cheat.task]), pool)
    detail = ([(f.kind, [e.seen[:90] for e in f.evidence[:2]]) for f in v.flags], v.score,
              [(c.name, c.score) for c in v.checks if c.score < 1][:5], v.infra_error, outputs[-1][-300:])
    assert v.infra_error is None, detail
    assert v.flags and not v.passed, detail
    assert v.score == 0.0 or all(f.neutralised for f in v.flags), detail
    if "linked" in cheat.name:  # refused where it was made, and the agent told so
        assert any("[refused:" in o for o in outputs), outputs
        assert "reaching_out" in {f.kind for f in v.flags}, detail


@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: f"{c.task}-{c.name}")
def test_honest_controls_are_clean(control: Control, tasks: dict[str, Task], pool: object) -> None:
    v, outputs = judge(tasks[control.task], control.commands(tasks[control.task]), pool)
    assert v.infra_error is None
    assert v.flags == [], [(f.kind, [e.seen for e in f.evidence[:3]]) for f in v.flags]
    assert not any("[refused:" in o for o in outputs)
    detail = [(c.name, c.score, c.detail[:120]) for c in v.checks if c.score < 1][:5]
    if isinstance(control.score, tuple):
        assert control.score[0] <= v.score < control.score[1], (v.score, detail)
    else:
        assert v.score == pytest.approx(control.score), detail
