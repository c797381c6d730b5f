"""Pins the public names that `rlvr` exports: changing them is a breaking change."""
from __future__ import annotations

import rlvr

EXPECTED = {
    "Check", "Episode", "Evidence", "ExecLimits", "ExecResult", "ExecStatus", "FinalState", "Flag",
    "InfraError",
    "Message", "RlvrError", "RunConfig", "Task", "TaskLimits", "ToolCall", "UserError", "Verdict", "Verifier",
    "VerifyContext", "load_config", "make", "names", "register", "__version__",
}


def test_public_names_pinned() -> None:
    assert set(rlvr.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(rlvr, name), name


def test_subpackages_are_not_shadowed() -> None:
    import importlib
    import types

    for sub in ("tasks", "sandbox", "envs", "verify", "rollout", "schedule", "store", "monitor"):
        importlib.import_module(f"rlvr.{sub}")
        assert isinstance(getattr(rlvr, sub), types.ModuleType), sub
