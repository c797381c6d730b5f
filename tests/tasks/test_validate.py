"""Format validation: a code task needs something to judge it by (hidden tests, randomised cases or io
cases)."""
from __future__ import annotations

import pytest

from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.settings import checked
from rlvr.tasks.spec import Task
from rlvr.tasks.validate import format_problems, validate_format


def test_every_built_in_code_tier_passes_format_validation() -> None:
    for tier in ("tiny", "easy", "medium", "hard"):
        src = registry.make("code", tier=tier)
        assert format_problems(checked(src.get(0))) == [], tier


def test_a_code_task_with_nothing_to_judge_it_by_is_refused_when_checked() -> None:
    with pytest.raises(UserError, match=r"\[verifier\.tests\]: a code task needs hidden tests"):
        checked(Task(id="t", domain="code", prompt="Write f."))
    hidden = {"test_x.py": "", "io.txt": "", "g.py": "", "r.py": ""}
    for verifier in ({"tests": ["test_x.py"]}, {"io": {"file": "io.txt", "entry": "m:f"}},
                     {"cases": {"generator": "g.py", "reference": "r.py", "entry": "m:f"}}):
        judged = Task(id="t", domain="code", prompt="Write f.", hidden=hidden, verifier=verifier)
        assert checked(judged) is judged and format_problems(judged) == [], verifier


def test_domain_samples_are_checked_like_loaded_tasks() -> None:
    rows = validate_format(None, domain="rules", n=3)
    assert len(rows) == 3 and all(r["ok"] for r in rows), rows
