"""The shell domain's tasks and settings: task i is one family's terminal task drawn from Random(seed + i),
its workspace text files or a packed tree (`rlvr.sandbox.tree`), its gold the state the family's commands
leave and its gold trajectory those commands at a terminal."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from rlvr.domains.shell.families import registry
from rlvr.domains.shell.families.base import Family, as_files
from rlvr.domains.tiered import DIFFICULTY, TieredConfig, TieredSource, known_names
from rlvr.tasks.domain import VerifierSettings
from rlvr.tasks.spec import FinalState, Task, TaskLimits

IMAGE = f"dockerfile:{Path(__file__).parent / 'image'}"
"""The domain's environment: a Debian terminal with git, make and gcc (image/Dockerfile)."""
INTRO = ("You are at a bash terminal in a Debian machine; your working directory, /workspace, holds the "
         "files "
         "of this task. Use the standard tools.\n\n")


class ShellConfig(TieredConfig):
    """Settings of the shell domain (`registry.make("shell", tier="hard")`, `[tasks.domains.shell]`)."""

    families: tuple[str, ...] | None = None
    """Only these families (None: every family of the tier)."""

    @field_validator("families")
    @classmethod
    def _families(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return known_names(v, registry(), "family")


class ShellSettings(VerifierSettings):
    """The `[verifier]` table of a shell task."""

    family: str
    """The task's family (`rlvr.domains.shell.families`)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The family's parameters of this task: the task follows from them."""

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        known_names((v,), registry(), "family")
        return v


def family_of(task: Task) -> tuple[Family, dict[str, Any]]:
    return registry()[task.verifier["family"]], dict(task.verifier.get("params") or {})


class ShellSource(TieredSource):
    """Procedural terminal tasks in three tiers."""

    name = "shell"
    description = "Terminal work judged on the final files and repositories, on fresh inputs where it can be."
    field = "families"

    def __init__(self, config: ShellConfig | None = None) -> None:
        super().__init__(config or ShellConfig())
        self.config: ShellConfig
        self.catalogue = registry()

    def build(self, index: int, rng: random.Random) -> Task:
        tier, fam = self.pick(index, rng)
        p = fam.params(rng)
        return Task(
            id=self.id_at(index), domain="shell", prompt=INTRO + fam.prompt(p),
            workspace=as_files(fam.initial(p), fam.packed),
            verifier={"kind": "shell", "family": fam.name, "params": p}, tier=tier,
            difficulty=DIFFICULTY[tier],
            limits=TaskLimits(max_turns=self.config.max_turns, max_tokens=12288, wall_s=900.0,
                              exec_timeout_s=60.0),
            image=IMAGE, source=f"shell:{self.config.seed}:{index}", seed=self.config.seed, index=index,
            metadata={"family": fam.name, "packed": fam.packed})

    def gold(self, task: Task) -> FinalState | None:
        fam, p = family_of(task)
        return FinalState(files=as_files(fam.gold(p), fam.packed))

    def gold_commands(self, task: Task) -> list[str] | None:
        fam, p = family_of(task)
        return fam.solve(p)

    def negatives(self, task: Task) -> dict[str, FinalState]:
        out = dict(super().negatives(task))
        fam, p = family_of(task)
        out.update({name: FinalState(files=as_files(state, fam.packed)) for name,
                    state in fam.wrongs(p).items()})
        return out
