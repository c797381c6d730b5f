"""The inference side, in folders by concern: the contract and records (`policy`, `episode`), the episode core
(`core`: rollout drivers, the token record, GRPO groups), the policy backends (`policies`), the gateway that
lets an agent from outside be the policy (`gateway`), and the fleet of vLLM engines on Ray (`fleet`)."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Episode": "episode",
    "Policy": "policy", "SamplingParams": "policy", "Completion": "policy",
    "make_policy": "policies.backends",
    "Rollouts": "core.rollouts", "RolloutStats": "core.rollouts", "EnvRollouts": "core.runner",
}
"""Public names, imported on first use (backends such as `hf` pull in torch only when asked for)."""

__all__ = ["Completion", "EnvRollouts", "Episode", "Policy", "RolloutStats", "Rollouts", "SamplingParams",
           "make_policy"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"rlvr.rollout.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'rlvr.rollout' has no attribute {name!r}")
