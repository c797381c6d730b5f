"""The Task record: what is practised. Frozen data; behaviour lives in loaders, envs and verifiers."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TASK_SCHEMA_VERSION = 1

Files = dict[str, str]
"""Relative POSIX path -> file text. Binary files are not part of the task format."""


class TaskLimits(BaseModel):
    """Budgets of one episode on a task. Running out is truncation, not failure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int = Field(1, ge=1)
    """Model turns allowed (1 for single-turn tasks)."""
    max_tokens: int = Field(512, ge=1)
    """Tokens the model may generate over the whole episode."""
    wall_s: float = Field(120.0, gt=0)
    """Wall-clock seconds for the whole episode, tools included."""
    exec_timeout_s: float | None = Field(None, gt=0)
    """Wall-clock seconds for one sandboxed command (a tool call or the verification run); None: the run's
    `[sandbox] timeout_s` (rlvr.sandbox.limits decides, field by field)."""
    memory_mb: int | None = Field(None, ge=16)
    """Memory limit of one sandboxed command, in MiB; None: the run's `[sandbox] memory_mb`."""


class Task(BaseModel):
    """One task: everything needed to rebuild its initial state and judge its final state.

    Hidden material (`hidden`, `solution`, `answer`) never enters the agent's sandbox; only the verifier sees
    it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    """Unique id within its domain or pack (for a task directory, normally the directory name)."""
    domain: str = Field(min_length=1)
    """Registered domain name; decides the default verifier."""
    prompt: str = ""
    """The statement the model sees."""
    workspace: Files = Field(default_factory=dict)
    """Initial files the model sees and may edit (stubs, visible tests, data)."""
    hidden: Files = Field(default_factory=dict)
    """Material only the verifier sees (hidden tests, generators, reference data)."""
    solution: Files | None = None
    """Optional gold final state of the workspace, used to prove the verifier."""
    answer: Any = None
    """Reference answer for single-turn tasks (the verifier's material; never shown to the model)."""
    verifier: dict[str, Any] = Field(default_factory=dict)
    """Verifier settings, e.g. the `[verifier]` table of task.toml (kind, weights, protected files)."""
    protected: tuple[str, ...] = ()
    """Workspace paths (globs) the candidate must not change; tampering with them is flagged."""
    difficulty: float | None = None
    """Prior difficulty in [0, 1] (0 easy), if known; the scheduler refines it from pass rates."""
    tier: str | None = None
    """Named difficulty tier of procedural domains (e.g. "tiny", "easy")."""
    limits: TaskLimits = Field(default_factory=TaskLimits)
    """Episode budgets."""
    attempts: bool = False
    """An answer task with feedback: each model turn is an answer, which its domain checks on the task's
    visible cases (`Domain.feedback`), saying back what failed, until one passes them or `limits.max_turns`
    answers were given; the last answer is judged. False: a task of several turns acts through tools."""
    requirements: tuple[str, ...] = ()
    """Python packages (pip requirement strings) the task's programs need: its tools and its verification run
    on an interpreter that has them (the sandbox's own when it does, else a venv made once for them and
    mounted read-only; `rlvr.sandbox.requirements`). Empty: the sandbox's interpreter as it is."""
    image: str | None = None
    """The environment its tools and verification run in: an OCI image reference (`dockerfile:DIR`,
    `docker-archive:FILE`, `oci:DIR`, `oci-archive:FILE`, `containers-storage:NAME` or a registry name; docs/
    IMAGES.md), a relative path resolved against the task's directory when it loads. None: the host root."""
    network: bool = False
    """Whether its jobs need the network; granted only where the run's `[sandbox] allow_network` allows it
    (otherwise the task is refused, never run without)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form facts about the task (generator parameters, source package, ...)."""
    source: str | None = None
    """Where the task came from: a path, `path:line` for JSONL, or `domain:seed:index`."""
    seed: int | None = None
    """Seed of a procedural task (the task is rebuilt from (domain, seed, index))."""
    index: int | None = None
    """Index of a procedural task within its domain."""
    schema_version: int = TASK_SCHEMA_VERSION
    """Version of this record's layout."""

    @property
    def multi_turn(self) -> bool:
        """True when the model acts through tools over several turns (an attempts task answers instead)."""
        return self.limits.max_turns > 1 and not self.attempts

    @property
    def turns(self) -> int:
        """Model turns an episode on it may take: tool turns, attempts, or the one answer."""
        return self.limits.max_turns if self.multi_turn or self.attempts else 1

    @property
    def key(self) -> str:
        """Globally unique key: `domain/id`."""
        return f"{self.domain}/{self.id}"


class FinalState(BaseModel):
    """The end state of an episode that a verifier judges: the workspace files and/or the final answer."""

    model_config = ConfigDict(frozen=True)

    files: Files = Field(default_factory=dict)
    """The workspace at the end (multi-turn and code tasks)."""
    answer: str | None = None
    """The model's final answer text (single-turn tasks)."""
    refused: list[str] = Field(default_factory=list)
    """Workspace paths that were symbolic links leading out of the workspace: refused (never read, removed
    where the env saw them made, and reported to the model), which a verifier flags (`rlvr.links`)."""
