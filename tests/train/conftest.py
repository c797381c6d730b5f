"""Shared fixtures of the trainer tests: a very small random model, built once per session."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-train"), n_layer=1, n_embd=32, n_head=2,
                            n_positions=256, seed=7)


@pytest.fixture
def tiny_policy(tiny_model_dir: Path):
    from rlvr.rollout.policies.hf import HFPolicy

    return HFPolicy(tiny_model_dir, device="cpu")
