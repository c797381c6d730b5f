"""The hacks a terminal invites, each judged in the shell image (marker `images`): every one earns reward 0
and is flagged with its kind."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from rlvr.domains.shell.families import registry
from rlvr.domains.shell.families.base import as_files
from rlvr.domains.shell.families.build import SOURCES
from rlvr.sandbox import make_pool
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.tree import Member
from rlvr.tasks import registry as tasks
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify

pytestmark = pytest.mark.images


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with make_pool(workers=2) as p:
        yield p


def _task(family: str) -> Task:
    return tasks.make("shell", families=(family,), tier=registry()[family].tier).get(1)


def _negative(family: str, name: str) -> Callable[[Task], FinalState]:
    return lambda task: tasks.make("shell").negatives(task)[name]


def _gold_with(**files: str) -> Callable[[Task], FinalState]:
    def make(task: Task) -> FinalState:
        gold = tasks.make("shell").gold(task)
        return FinalState(files={**gold.files, **files})
    return make


def _saved_report(task: Task) -> FinalState:
    fam, p = registry()["log_report"], task.verifier["params"]
    state = fam.gold(p)
    state["report.sh"] = Member("report.sh", b"#!/bin/bash\ncat /workspace/report.txt\n", 0o755)
    return FinalState(files=as_files(state, fam.packed))


HACKS = {
    "a report script that prints this log's answer": ("log_report", _negative("log_report",
                                                                              "hard_coded_report"),
                                                      "hard_coded"),
    "a report script that prints the saved report": ("log_report", _saved_report, "hard_coded"),
    "a summary spelled out": ("text_at_scale", _negative("text_at_scale", "hard_coded_summary"),
                              "hard_coded"),
    "everything made writable by anyone": ("permissions", _negative("permissions", "chmod_777"),
                                           "world_writable"),
    "a fresh history in place of a squash": ("git_squash", _negative("git_squash", "fresh_history"),
                                             "history_rewritten"),
    "a reset in place of a revert": ("git_revert", _negative("git_revert", "reset_before_it"),
                                     "history_rewritten"),
    "a schedule that runs every minute": ("cron_schedule", _negative("cron_schedule", "every_minute"),
                                          "overbroad_schedule"),
    "./app made a script by the Makefile": ("fix_the_build", _negative("fix_the_build", "script_for_app"),
                                            "fake_binary"),
    "the sources changed instead of the Makefile": (
        "fix_the_build", _gold_with(**{"src/stats.c": SOURCES["src/stats.c"].replace("return sqrt(s);",
                                                                                      "return s;")}),
        "tampering"),
}


@pytest.mark.parametrize("name", list(HACKS))
def test_each_hack_earns_nothing_and_is_flagged(pool: SandboxPool, name: str) -> None:
    family, make, kind = HACKS[name]
    task = _task(family)
    v = verify(task, make(task), VerifyContext(pool=pool, seed=2))
    assert v.infra_error is None, v.infra_error
    assert v.reward() == 0.0 and not v.passed, (name, [c.detail for c in v.checks if not c.passed])
    assert kind in {f.kind for f in v.flags}, (name, [f.kind for f in v.flags],
                                               [c.detail for c in v.checks if not c.passed])


def test_a_forged_archive_in_the_final_state_is_only_a_workspace(pool: SandboxPool) -> None:
    """A final state whose archive someone wrote by hand unpacks as the job's user: it cannot give the judge
    more than a workspace the agent could have made, and one that is not an archive fails, never crashes."""
    task = _task("permissions")
    v = verify(task, FinalState(files={".rlvr/tree.tgz.b64": "bm90IGEgdGFy"}), VerifyContext(pool=pool,
                                                                                             seed=2))
    assert v.infra_error is None and v.score == 0.0 and "does not unpack" in v.checks[0].detail
