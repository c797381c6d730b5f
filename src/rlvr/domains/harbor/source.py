"""Harbor tasks as a task source (the tasks SPEC `harbor:PATH`: one task directory, or a directory of them),
and the states that prove each one's verifier, played in the task's own environment:

- gold: solution/solve.sh run in a fresh lease of the agent's image (solution/ mounted read-only at
  /solution, `[solution] env` set), the working directory it leaves is the gold state: it must score 1;
- untouched: the environment as the image starts it;
- tests_deleted, tests_edited: the agent deletes what looks like tests in the files it can reach (test_*,
  *_test.*, test/ and tests/ directories), or makes each pass whatever it checks: the task's own tests are in
  /tests, which it never sees, so this changes nothing the verifier reads;
- reward_file_only: an agent that only writes reward files, at /logs/verifier (refused: the image's root is
  read-only) and in its working directory (logs/verifier/reward.txt and .json, reward.txt): the verification's
  /logs is made fresh, so none of them is read.

Each negative control must score 0.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlvr.domains.harbor.format import is_task_dir, load_task
from rlvr.domains.harbor.settings import DOMAIN_NAME, HarborSettings
from rlvr.domains.harbor.verifier import first_line, run_script
from rlvr.errors import InfraError, UserError
from rlvr.sandbox.base import environment_of, in_environment
from rlvr.sandbox.limits import for_task
from rlvr.tasks.settings import settings_of
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import default_pool

SOLUTION = "/solution"
DELETE_TESTS = ("find . -depth \\( -name 'test_*' -o -name '*_test.*' -o -name test -o -name tests \\) "
                "-exec rm -rf {} + 2>/dev/null; true")
"""The negative control that deletes the tests an agent can reach."""
EDIT_TESTS = ("find . \\( -name 'test_*' -o -name '*_test.*' -o -path '*/test/*' -o -path '*/tests/*' \\) "
              "-type f -exec sh -c 'for f; do printf \"#!/bin/sh\\necho PASS\\nexit 0\\n\" > \"$f\"; done' "
              "sh {} + 2>/dev/null; true")
"""The negative control that makes every test an agent can reach pass whatever it checks."""
WRITE_REWARDS = ("mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null; "
                 "echo '{\"reward\": 1}' > /logs/verifier/reward.json 2>/dev/null; "
                 "mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt && "
                 "echo '{\"reward\": 1}' > logs/verifier/reward.json && echo 1 > reward.txt; true")
"""The negative control that only writes reward files (where Harbor's verifier would read them, and in the
working directory)."""


class HarborSource(TaskSource):
    """The Harbor tasks at a path (None: no tasks; the domain's own source, which proves any Harbor task)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).resolve() if path is not None else None
        self._dirs: list[Path] = []
        self.name, self.description = DOMAIN_NAME, "Harbor tasks: the tasks SPEC harbor:PATH"
        if self.path is None:
            return
        if not self.path.is_dir():
            raise UserError("no such directory", file=self.path, fix="give a Harbor task directory or a "
                            "directory of them")
        if is_task_dir(self.path):
            self._dirs = [self.path]
        else:
            self._dirs = sorted(Path(e.path) for e in os.scandir(self.path)
                                if e.is_dir() and not e.name.startswith(".") and is_task_dir(Path(e.path)))
            if not self._dirs:
                raise UserError("no Harbor task here (a directory with task.toml, or a directory of them)",
                                file=self.path, fix="check the path")
        self.name = self.path.name
        self.description = f"Harbor tasks at {self.path}"

    @property
    def size(self) -> int:
        return len(self._dirs)

    def id_at(self, index: int) -> str:
        return self._dirs[index].name

    def get(self, index: int) -> Task:
        return load_task(self._dirs[index])

    # ----------------------------------------------------------------------------------- proving states
    def gold(self, task: Task) -> FinalState | None:
        solve = Path(str(task.source)) / "solution" / "solve.sh"
        if not solve.is_file():
            return None
        s = settings_of(task, HarborSettings)
        return play(task, (f"{SOLUTION}/solve.sh", first_line(solve), s.solution_env),
                    mounts={SOLUTION: str(solve.parent)})

    def negatives(self, task: Task) -> dict[str, FinalState]:
        return {"untouched": play(task), "tests_deleted": play(task, DELETE_TESTS),
                "tests_edited": play(task, EDIT_TESTS), "reward_file_only": play(task, WRITE_REWARDS)}


def play(task: Task, script: str | tuple[str, str, dict[str, str]] | None = None,
         mounts: dict[str, Any] | None = None, pool: Any = None) -> FinalState:
    """The final state an agent leaves that runs `script` (a shell command, or a task script as (path, first
    line, env)) in a fresh lease of the task's environment; None runs nothing."""
    pool = in_environment(pool or default_pool(), **environment_of(task))
    limits = for_task(pool, task, timeout_s=task.limits.wall_s)
    with pool.lease(dict(task.workspace), mounts=mounts or {}) as sb:  # type: ignore[call-arg]
        if script is not None:
            res = run_script(sb, *script, limits) if isinstance(script, tuple) else \
                sb.run(["sh", "-c", script], limits=limits)
            if res.infra_error:
                raise InfraError(f"playing {task.key} in its environment: {res.error}")
        return FinalState(files=sb.read_files(None))
