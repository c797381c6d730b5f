"""Shared fixtures of the integration tests: single-turn tasks judged by rlvr's exact-answer verifier."""
from __future__ import annotations

import pytest

from rlvr.tasks.spec import Task


@pytest.fixture
def answer_tasks() -> list[Task]:
    """Six single-turn tasks whose answers are one character, verified by the `answer` verifier kind."""
    return [Task(id=f"t{i}", domain="toy", prompt=f"Reply with {i}.", answer=str(i),
                 verifier={"kind": "answer"})
            for i in range(6)]
