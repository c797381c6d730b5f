"""ExecResult and ExecLimits: what one sandboxed command did, and what it was allowed to do."""
from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class ExecStatus(str, Enum):
    """How a sandboxed command ended. Only `infra_error` is the sandbox's fault rather than the program's."""

    ok = "ok"
    exit_nonzero = "exit_nonzero"
    timeout = "timeout"
    memory_limit = "memory_limit"
    output_limit = "output_limit"
    process_limit = "process_limit"
    file_limit = "file_limit"
    infra_error = "infra_error"


class ExecLimits(BaseModel):
    """Kernel-enforced limits of one sandboxed command.

    Built with only some fields it is also a layer of partial limits: the fields given (`model_fields_set`) go
    over the pool's `[sandbox]` defaults and the other layers, per field (`rlvr.sandbox.limits.resolve`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(10.0, gt=0)
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_s: float | None = Field(None, gt=0)
    """CPU seconds (RLIMIT_CPU); None: the wall timeout rounded up."""
    memory_mb: int = Field(512, ge=16)
    """Memory of the whole process tree (cgroup), in MiB."""
    processes: int = Field(64, ge=1)
    """Processes and threads of the whole tree (pids cgroup)."""
    file_size_mb: int = Field(64, ge=1)
    """Largest file the program may write (RLIMIT_FSIZE), in MiB."""
    workspace_mb: int = Field(256, ge=1)
    """Total size of the workspace (a size-limited tmpfs), in MiB."""
    open_files: int = Field(256, ge=16)
    """Open file descriptors (RLIMIT_NOFILE)."""
    output_bytes: int = Field(1 << 20, ge=1024)
    """Bytes kept of stdout and of stderr each; the rest is drained and counted, then the job is stopped."""


class ExecResult(BaseModel):
    """What one sandboxed command did. Failures are data: a sandbox never raises for the program's faults."""

    model_config = ConfigDict(frozen=True)

    status: ExecStatus
    """How the command ended (see ExecStatus)."""
    exit_code: int | None = None
    """Exit status when the program exited by itself."""
    signal: int | None = None
    """Signal that ended the program, if any."""
    stdout: str = ""
    """Captured standard output (capped at limits.output_bytes, decoded with replacement)."""
    stderr: str = ""
    """Captured standard error (capped likewise)."""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_s: float = 0.0
    """Wall-clock seconds from request to result."""
    cpu_s: float = 0.0
    """CPU seconds used by the process tree."""
    peak_memory_mb: float = 0.0
    """Peak memory of the process tree, MiB (0 when the backend cannot measure it)."""
    files: dict[str, str] = Field(default_factory=dict)
    """Files read back from the workspace after the command, as asked for by the caller."""
    error: str | None = None
    """For infra_error: what went wrong in the sandbox itself."""
    attempts: int = 1
    """How many times the job was run (a crashed worker is retried once)."""
    channel: str = ""
    """Bytes the program wrote to the extra result pipe on fd 3 (only when run with `channel=True`)."""

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.ok

    @property
    def infra_error(self) -> bool:
        return self.status is ExecStatus.infra_error
