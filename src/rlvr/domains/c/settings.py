"""The c domain's settings: the domain's own (`[tasks.domains.c]`) and its tasks' `[verifier]` table."""
from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from rlvr.domains.c.families import registry
from rlvr.domains.tiered import TieredConfig, known_names
from rlvr.errors import UserError
from rlvr.tasks.domain import VerifierSettings
from rlvr.tasks.spec import Task

CASES_FILE = "cases.json"
"""The task's hidden cases (in `Task.hidden`), as the source drew them."""


class CConfig(TieredConfig):
    """Settings of the c domain (`registry.make("c", tier="hard")`, `[tasks.domains.c]`)."""

    families: tuple[str, ...] | None = None
    """Only these families (None: every family of the tier)."""
    visible_cases: int = Field(4, ge=1, le=32)
    """Cases in the visible tests."""
    hidden_cases: int = Field(8, ge=1, le=64)
    """Hidden cases drawn with the task."""
    fresh_cases: int = Field(8, ge=0, le=64)
    """Cases drawn afresh at each verification (from the verification seed)."""

    @field_validator("families")
    @classmethod
    def _families(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return known_names(v, registry(), "family")


class CSettings(VerifierSettings):
    """The `[verifier]` table of a c task."""

    family: str
    """The task's family (`rlvr.domains.c.families`)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The family's parameters of this task."""
    module: str
    """The module's file stem (include/<module>.h, src/<module>.c, tests/test_<module>.c)."""
    fresh: int = Field(8, ge=0, le=64)
    """Cases drawn afresh at each verification."""
    case_timeout_s: float = Field(5.0, gt=0, le=60)
    """Seconds one case may run."""
    compile_timeout_s: float = Field(60.0, gt=0, le=600)
    """Seconds the hidden build may take."""

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        known_names((v,), registry(), "family")
        return v

    def check(self, task: Task) -> None:
        if CASES_FILE not in task.hidden:
            raise UserError(f"a c task needs its hidden cases in hidden/{CASES_FILE}",
                            file=task.source or task.key, field="hidden",
                            fix="export the task again from the c domain (its cases are drawn with it)")
        if f"include/{self.module}.h" not in task.workspace:
            raise UserError(f"a c task needs include/{self.module}.h in its workspace",
                            file=task.source or task.key, field="verifier.module",
                            fix="name the module whose header the workspace holds")

    def test_command(self) -> list[str] | None:
        return ["make", "-s", "test"]
