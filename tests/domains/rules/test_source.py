"""The rules domain: determinism, scenarios and tiers, gold and negative controls."""
from __future__ import annotations

import pytest

from rlvr.domains.rules.verifier import RulesVerifier, compile_checks
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.verify.base import VerifyContext

VERIFIER = RulesVerifier(VerifyContext())


def test_rebuilt_exactly_from_seed_and_index() -> None:
    a, b = registry.make("rules", seed=2), registry.make("rules", seed=2)
    assert a.size is None and [a.get(i) for i in range(9)] == [b.get(i) for i in range(9)]
    assert a.get(1).prompt != registry.make("rules", seed=9).get(1).prompt


def test_every_scenario_declares_compilable_checks() -> None:
    tasks = registry.make("rules").sample(9)
    assert {t.metadata["scenario"] for t in tasks} == {"invoice", "rota", "expenses"}
    for task in tasks:
        assert compile_checks(task)


def test_gold_scores_one_and_negatives_zero() -> None:
    src = registry.make("rules")
    for task in src.sample(45):
        verdict = VERIFIER.verify(task, src.gold(task))
        assert verdict.score == 1.0 and verdict.passed, [c for c in verdict.checks if not c.passed]
        negatives = src.negatives(task)
        assert {"empty_answer", "echoed_prompt", "wrong_answer", "buried_among_wrong",
                "hedged_answers"} <= set(
            negatives)
        for name, final in negatives.items():
            assert VERIFIER.verify(task, final).score == 0.0, (task.metadata["scenario"], name)


def test_bad_settings() -> None:
    with pytest.raises(UserError, match="scenario"):
        registry.make("rules", scenario="payroll")
