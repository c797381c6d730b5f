"""The `repo-real` domain: bug-fix and implementation tasks built from real Python projects' sdists.

The pack is built, not shipped: `make repo-real` (`rlvr tasks build repo repo-real -o PACK`) runs the
builder on the pinned projects below into `.rlvr-cache/repo-real/pack` (or `$RLVR_REPO_REAL_PACK`)
and stamps it; a second run with the same pins does nothing. Each task is a project's tree with one break from
the builder's generators; the hidden tests are the project's own stable test files: each fail-to-pass test an
equal share of the score, each pass-to-pass test a gate, and a pass only when the whole kept suite passes
(`rlvr.domains.repo.build`).
"""
from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlvr.domains.repo.source import repo_negatives
from rlvr.errors import UserError
from rlvr.tasks.loaders import load_task_dir
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task

PROJECTS: tuple[str, ...] = ("pypi:inflection==0.5.1", "pypi:toolz==1.0.0", "pypi:parse==1.20.2",
                             "pypi:xmltodict==0.14.2", "pypi:cachetools==5.5.0")
"""The pinned projects (all MIT or BSD licensed, pure Python, test suites in their sdists; cachetools has a
src layout)."""
PER_PROJECT = 64
"""Most tasks kept per project (the pack holds up to len(PROJECTS) * PER_PROJECT)."""
STAMP = ".built.json"
BUILD_VERSION = 11
"""What the pack's stamp records of the builder: raise it when a change to the builder or the verifier's
harness changes which tasks a build keeps, so a cached pack of the old build is rebuilt."""


def default_pack() -> Path:
    return Path(os.environ.get("RLVR_REPO_REAL_PACK", ".rlvr-cache/repo-real/pack"))


class RepoRealConfig(BaseModel):
    """Settings of the repo-real domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pack: str | None = None
    """The built pack directory (default `$RLVR_REPO_REAL_PACK` or `.rlvr-cache/repo-real/pack`)."""


class RepoRealSource(TaskSource):
    """The tasks of the built pack, in name order."""

    def __init__(self, cfg: RepoRealConfig | None = None) -> None:
        self.cfg = cfg or RepoRealConfig()
        self.path = Path(self.cfg.pack) if self.cfg.pack else default_pack()
        self.name = "repo-real"
        self.description = ("Bug-fix and implementation tasks in real Python projects (built by `make "
                            "repo-real`)")

    @cached_property
    def _names(self) -> list[str]:
        if not self.path.is_dir():
            return []
        return sorted(e.name for e in os.scandir(self.path) if e.is_dir() and not e.name.startswith("."))

    @property
    def size(self) -> int:
        return len(self._names)

    def id_at(self, index: int) -> str:
        return self._names[self._check(index)]

    def _check(self, index: int) -> int:
        if not self._names:
            raise UserError("the repo-real pack is not built", file=self.path,
                            fix="run `make repo-real` (rlvr tasks build repo repo-real -o PACK)")
        if not 0 <= index < self.size:
            raise UserError(f"repo-real has tasks 0..{self.size - 1}, not {index}", field="index",
                            fix=f"use repo-real:0 .. repo-real:{self.size - 1}")
        return index

    def get(self, index: int) -> Task:
        return load_task_dir(self.path / self.id_at(index))

    def negatives(self, task: Task) -> dict[str, FinalState]:
        return repo_negatives(super().negatives(task), task)
