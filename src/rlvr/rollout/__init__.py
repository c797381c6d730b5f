"""The inference side: Policy protocol and backends, the rollout engine, Episode records."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Episode": "episode",
    "Policy": "policy", "SamplingParams": "policy", "Completion": "policy", "make_policy": "backends",
    "RolloutEngine": "engine", "RolloutStats": "engine",
    "pass_at_k": "evaluate",
}
"""Public names, imported on first use (backends such as `hf` pull in torch only when asked for)."""

__all__ = ["Completion", "Episode", "Policy", "RolloutEngine", "RolloutStats", "SamplingParams", "make_policy",
           "pass_at_k"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rlvr.rollout.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rlvr.rollout' has no attribute {name!r}")
