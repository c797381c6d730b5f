"""Fixtures of the real-model tests: SmolLM2-135M-Instruct, converted once by `make real-model`.

Every module here sets `pytestmark = pytest.mark.real` (`make test-real`; `make test` deselects them). The
model directory is `$RLVR_REAL_MODEL` (relative to the repository), default
`.rlvr-cache/smollm2-135m-instruct`; a missing one fails the test with the command that builds it, never a
skip.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[2]
TOOLS_TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")
"""A ChatML template that renders tool schemas natively (`tools=`), in the style of Qwen2.5's."""


@pytest.fixture(scope="session")
def real_dir() -> Path:
    path = Path(os.environ.get("RLVR_REAL_MODEL", ".rlvr-cache/smollm2-135m-instruct"))
    # tests change directory: the path must not be relative
    path = path if path.is_absolute() else REPO / path
    if not (path / "config.json").is_file():
        pytest.fail(f"the real model is not built at {path}: run `make real-model` (or set RLVR_REAL_MODEL)")
    return path


@pytest.fixture(scope="session")
def real(real_dir):
    from rlvr.rollout.policies.hf import HFPolicy

    return HFPolicy(real_dir, device="cpu", threads=1, max_context=1024)


@pytest.fixture(scope="session")
def pool():
    from rlvr.sandbox.unsafe import UnsafePool

    return UnsafePool(warn=False)
