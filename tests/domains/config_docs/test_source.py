"""The config domain: determinism, both kinds and tiers, gold and negative controls."""
from __future__ import annotations

import json

import pytest

from rlvr.domains.config_docs.source import break_config
from rlvr.domains.config_docs.verifier import ConfigVerifier
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.verify.base import VerifyContext

VERIFIER = ConfigVerifier(VerifyContext())


def test_rebuilt_exactly_from_seed_and_index() -> None:
    a, b = registry.make("config", seed=3), registry.make("config", seed=3)
    assert a.size is None and [a.get(i) for i in range(6)] == [b.get(i) for i in range(6)]
    assert a.get(2).prompt != registry.make("config", seed=4).get(2).prompt


def test_kinds_and_tiers() -> None:
    tasks = registry.make("config").sample(12)
    assert {t.metadata["kind"] for t in tasks} == {"deployment", "pipeline"}
    assert {t.tier for t in tasks} == {"easy", "medium", "hard"}
    hard = registry.make("config", kind="pipeline", tier="hard").get(0)
    assert len(json.loads(hard.answer)["stages"]) == 6


def test_gold_scores_one_and_negatives_zero() -> None:
    src = registry.make("config")
    for task in src.sample(24):
        gold = VERIFIER.verify(task, src.gold(task))
        assert gold.score == 1.0 and gold.passed, [c for c in gold.checks if not c.passed]
        negatives = src.negatives(task)
        assert {"empty_answer", "echoed_prompt", "wrong_config", "buried_among_wrong",
                "hedged_answers"} <= set(
            negatives)
        for name, final in negatives.items():
            assert VERIFIER.verify(task, final).score == 0.0, name


def test_wrong_config_passes_schema_and_gates_but_no_rule() -> None:
    src = registry.make("config", kind="deployment")
    task = src.get(0)
    verdict = VERIFIER.verify(task, src.negatives(task)["wrong_config"])
    gates = [c for c in verdict.checks if c.name.startswith("gate:")]
    assert gates and all(c.passed for c in gates)
    assert verdict.score == 0.0
    assert break_config(json.loads(task.answer)).keys() == {"services"}


def test_bad_settings() -> None:
    with pytest.raises(UserError, match="kind"):
        registry.make("config", kind="helm")
    with pytest.raises(UserError, match="negative index"):
        registry.make("config").get(-2)
