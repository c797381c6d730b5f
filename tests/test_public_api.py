"""Pins the public names that `rlvr` exports: changing them is a breaking change."""
from __future__ import annotations

import rlvr

EXPECTED = {
    "Check", "Episode", "Evidence", "ExecLimits", "ExecResult", "ExecStatus", "FinalState", "Flag", "InfraError",
    "Message", "RlvrError", "RunConfig", "Task", "TaskLimits", "ToolCall", "UserError", "Verdict", "Verifier",
    "VerifyContext", "load_config", "make", "names", "register", "verify", "__version__",
}


def test_public_names_pinned() -> None:
    assert set(rlvr.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(rlvr, name), name
