"""Fixtures of the rollout tests: a tiny model built from scratch, a plain pool, and test verifiers."""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
import torch

from rlvr.sandbox.unsafe import UnsafePool
from rlvr.verify import Check, Verdict
from tests.kinds import register_kind

torch.set_num_threads(1)

SOLVED = "return a + b"


class FileCheck:
    """Passes when sol.py contains the fix, or the answer is 42."""

    def verify(self, task, final) -> Verdict:
        ok = SOLVED in final.files.get("sol.py", "") or (final.answer or "").strip() == "42"
        return Verdict.from_checks([Check(name="fixed", score=float(ok), passed=ok)])


class Flaky:
    """Cannot judge the first `fail` times it is asked about each task (an infra fault)."""

    seen: ClassVar[dict[str, int]] = {}

    def verify(self, task, final) -> Verdict:
        n = Flaky.seen.get(task.id, 0)
        Flaky.seen[task.id] = n + 1
        if n < int(task.metadata.get("fail", 0)):
            return Verdict.infra("judge unavailable")
        return FileCheck().verify(task, final)


for kind, factory in (("test-rollout-file", lambda ctx: FileCheck()),
                      ("test-rollout-flaky", lambda ctx: Flaky())):
    register_kind(kind, factory)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), n_layer=2, n_embd=64, n_head=4, n_positions=1024,
                            seed=3)


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    from rlvr.rollout.policies.hf import HFPolicy

    return HFPolicy(tiny_dir, device="cpu", threads=1)


@pytest.fixture(scope="session")
def pool() -> UnsafePool:
    return UnsafePool(warn=False)
