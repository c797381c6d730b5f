"""The `Domain` record: everything rlvr knows about one domain, declared once by the package that implements
it.

A domain package (`rlvr/domains/<name>/`, or any installed package) builds one `Domain` and exposes it through
the `rlvr.domains` entry-point group; `rlvr.tasks.registry` loads it and every layer reads it from there: the
loaders validate a task's `[verifier]` table against the settings model of its kind, the env offers the
domain's tools, the verify layer builds the kind's verifier, `rlvr tasks list` shows the description. Nothing
else about a domain is registered anywhere.

The record sits at the bottom of the pipeline, so it names what the upper layers provide only by shape: a tool
is an `rlvr.envs.tools.Tool`, a verifier factory takes an `rlvr.verify.base.VerifyContext` and returns an
`rlvr.verify.base.Verifier`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task


class VerifierSettings(BaseModel):
    """The `[verifier]` table of a task, for a kind with no settings beyond `kind`; each kind with settings
    subclasses it. Unknown keys are refused, so a typo never silently weakens a task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str | None = None
    """Verifier kind; default the verifier of the task's domain."""

    def check(self, task: Task) -> None:
        """Checks of the settings against the rest of the task (e.g. that the files they name exist); raises
        UserError. Runs once, when the settings are first read."""

    def workspace_tests(self) -> list[str] | None:
        """The workspace tests the env's `run_tests` tool runs (None: every test_*.py / *_test.py file)."""
        return None

    def test_command(self) -> list[str] | None:
        """The command the env's `run_tests` tool runs when the task's visible tests are not pytest's (a C
        task's `make test`); None: pytest over `workspace_tests()`."""
        return None


class NoConfig(BaseModel):
    """Settings model of a domain that takes no settings."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class VerifierKind:
    """One verifier kind: how to build its verifier and the model of its tasks' `[verifier]` tables."""

    factory: Callable[[Any], Any]
    """`factory(ctx: VerifyContext) -> Verifier`."""
    settings: type[VerifierSettings] = VerifierSettings
    """The model of the `[verifier]` table of this kind's tasks, validated when a task loads."""

    def __post_init__(self) -> None:
        if not (isinstance(self.settings, type) and issubclass(self.settings, VerifierSettings)):
            raise TypeError(f"the settings of a verifier kind must subclass VerifierSettings, got "
                            f"{self.settings!r}")


@dataclass(frozen=True)
class Domain:
    """One domain, whole: where its tasks come from, how they are judged and what tools its episodes get."""

    name: str
    """The name tasks carry in `Task.domain` and specs use (`code:64`); no spaces, commas or colons."""
    source: Callable[[Any], TaskSource]
    """`source(settings)` builds the task source from a validated `settings` instance."""
    settings: type[BaseModel] = NoConfig
    """The model of the domain's settings (`[tasks.domains.<name>]` in a run config); unknown keys refused."""
    description: str = ""
    """One line for `rlvr tasks list` (only the first line is kept)."""
    verifier: str | None = None
    """The verifier kind its tasks use when they name none (None: the domain's name)."""
    verifiers: Mapping[str, VerifierKind] = field(default_factory=dict)
    """The verifier kinds this domain defines. A kind may be declared by several domains only as the same
    `VerifierKind` (the reasoning-gym family shares one); domains that reuse another's kind (repo uses `code`)
    only name it in `verifier`."""
    tools: tuple[Any, ...] = ()
    """Tools (`rlvr.envs.tools.Tool`) offered to its multi-turn tasks beside the built-in ones."""
    needs: tuple[str, ...] = ()
    """Modules the sandbox's interpreter must import to judge its tasks (the `code` kind: `pytest`). A run
    that uses the domain is refused at start-up, in one line, when one is missing there
    (`rlvr.verify.needs`), rather than masking every episode as an infra error."""
    feedback: Callable[[Any, Task, str], Any] | None = None
    """`feedback(pool, task, answer) -> rlvr.envs.feedback.Check`: one answer of an attempts task
    (`Task.attempts`) run on the task's visible cases in the sandbox pool, and what failed (None: the domain
    has no attempts tasks). It never sees hidden material; the verifier still judges the last answer."""
    task_defaults: Callable[[dict[str, Any], Any], None] | None = None
    """`task_defaults(fields, file)`: fills in, in place, what a bare task directory of this domain leaves out
    (the code domain: its hidden tests and protected files), before the Task is built; `file` is its
    task.toml, named in a UserError."""
    requirements: tuple[str, ...] = ()
    """Python packages (pip names) the domain's package and its verifier import in rlvr's own process beyond
    rlvr's core (math: math-verify): with the distributions of its `needs` (what the sandbox imports), what an
    exported task's verifier installs (`rlvr tasks export --format harbor`)."""
    open_path: Callable[[str], TaskSource] | None = None
    """`open_path(path)`: the tasks stored at a path in the domain's own format (the Harbor domain: a Harbor
    task directory or a directory of them), which a tasks SPEC names as `NAME:PATH`; None: the domain reads
    none."""

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() or c in ",:" for c in self.name):
            raise ValueError(f"invalid domain name {self.name!r}: no spaces, commas or colons")
        lines = self.description.strip().splitlines()
        object.__setattr__(self, "description", lines[0] if lines else "")
        object.__setattr__(self, "verifiers", dict(self.verifiers))
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "needs", tuple(self.needs))
        object.__setattr__(self, "requirements", tuple(self.requirements))

    @property
    def kind(self) -> str:
        """The verifier kind of its tasks."""
        return self.verifier or self.name
