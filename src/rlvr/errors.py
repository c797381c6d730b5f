"""Typed errors, one per boundary a failure can cross.

`UserError` is a mistake in what a user gave us (a file, a field, a flag). The CLI prints its one-line
message and exits 2, never a traceback. Everything else is an internal error (exit 1).
"""
from __future__ import annotations

from pathlib import Path


class RlvrError(Exception):
    """Base of every error rlvr raises on purpose."""


class UserError(RlvrError):
    """Bad input: names the file (and line or field), what is wrong and what to do.

    The message is always one line, so a CLI can print it as is.
    """

    def __init__(self, what: str, *, file: str | Path | None = None, field: str | None = None,
                 fix: str | None = None, line: int | None = None) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.fix = fix
        self.line = line
        self.what = what
        where = ""
        if self.file:
            where = self.file + (f":{line}" if line is not None else "")
        if field:
            where = f"{where} [{field}]" if where else f"[{field}]"
        parts = [p for p in (where, what) if p]
        msg = ": ".join(parts)
        if fix:
            msg += f" ({fix})"
        super().__init__(" ".join(msg.split()))


class NotYetAvailable(UserError):
    """A command whose machinery has not landed yet."""


class InfraError(RlvrError):
    """The infrastructure failed (a sandbox crashed, a verifier could not judge), not the policy."""


class Stalled(RlvrError):
    """Work that should progress by itself did not, within a watchdog's limit; the message names the phase."""


class MostlyMasked(RlvrError):
    """Most episodes of a run were masked by infra faults (a dead policy server, sandboxes that cannot start):
    nothing it measures or learns is about the policy. The message names the first infra error."""


class RankLost(RlvrError):
    """A collective of a torch.distributed job failed because another rank is gone (killed, crashed)."""

    reported = False
    """Set once this process has said so (the line a launcher's SIGTERM must not repeat)."""


class SandboxUnavailable(UserError):
    """The sandbox cannot start on this machine (e.g. bubblewrap is missing)."""
