"""Format validation: a code task needs something to judge it by (hidden tests, randomised cases or io cases)."""
from __future__ import annotations

from rlvr.tasks import registry
from rlvr.tasks.spec import Task
from rlvr.tasks.validate import format_problems


def test_every_built_in_code_tier_passes_format_validation() -> None:
    for tier in ("tiny", "easy", "medium", "hard"):
        src = registry.make("code", tier=tier)
        assert format_problems(src.get(0)) == [], tier


def test_a_code_task_with_nothing_to_judge_it_by_is_a_format_problem() -> None:
    bare = Task(id="t", domain="code", prompt="Write f.")
    assert any("without hidden tests" in p for p in format_problems(bare))
    for verifier in ({"tests": ["test_x.py"]}, {"io": {"file": "io.txt", "entry": "m:f"}},
                     {"cases": {"generator": "g.py", "reference": "r.py", "entry": "m:f"}}):
        judged = Task(id="t", domain="code", prompt="Write f.", verifier=verifier)
        assert not any("without hidden tests" in p for p in format_problems(judged)), verifier
