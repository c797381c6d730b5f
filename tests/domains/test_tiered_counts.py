"""The domains in images of their own (c, sql, shell) each give at least 100 different tasks, in three tiers
that take turns with the index (no podman: tasks are built, not run)."""
from __future__ import annotations

from collections import Counter

import pytest

from rlvr.tasks import registry


@pytest.mark.parametrize("domain", ["c", "sql", "shell"])
def test_the_first_120_tasks_hold_100_different_ones_in_three_tiers(domain: str) -> None:
    tasks = [registry.make(domain).get(i) for i in range(120)]
    different = {(t.prompt, tuple(sorted(t.workspace.items()))) for t in tasks}
    assert len(different) >= 100, len(different)
    assert Counter(t.tier for t in tasks) == {"easy": 40, "medium": 40, "hard": 40}
    assert [t.tier for t in tasks[:3]] == ["easy", "medium", "hard"]
    assert len({t.id for t in tasks}) == 120
