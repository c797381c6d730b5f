"""The `[verifier]` table of a Harbor task as rlvr keeps it: everything `format.load_task` derived from its
task.toml that the verification needs, so that the Task record alone says how it is judged."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.errors import UserError
from rlvr.tasks.domain import VerifierSettings
from rlvr.tasks.spec import Task

DOMAIN_NAME = "harbor"
"""The domain (and verifier kind) of Harbor tasks."""


class HarborSettings(VerifierSettings):
    """How a Harbor task is verified: tests/test.sh in a fresh lease with a fresh /logs (docs/HARBOR.md)."""

    mode: Literal["shared", "separate"] = "shared"
    """`[verifier] environment_mode`: the tests run in the agent's image (shared) or in their own (separate),
    each time in a fresh lease that holds the agent's final state."""
    image: str | None = None
    """The separate verifier's image reference (relative paths: the task directory's); None in shared mode."""
    network: bool = False
    """Whether the tests reach the network (`[verifier] network_mode`, else `[environment]`'s; granted only
    where `[sandbox] allow_network` allows it)."""
    timeout_s: float = Field(600.0, gt=0)
    """`[verifier] timeout_sec`: the wall-clock limit of tests/test.sh; past it the verdict is 0."""
    env: dict[str, str] = Field(default_factory=dict)
    """`[verifier] env`: variables tests/test.sh runs with."""
    solution_env: dict[str, str] = Field(default_factory=dict)
    """`[solution] env`: variables solution/solve.sh runs with."""
    artifacts: tuple[str, ...] = ()
    """`artifacts`: the paths of the agent's environment a separate verifier receives (those the agent could
    write: under its working directory)."""

    def check(self, task: Task) -> None:
        if not task.source:
            raise UserError("a Harbor task needs its directory (Task.source) for its tests", field="source",
                            fix="load it with the tasks SPEC harbor:PATH")
