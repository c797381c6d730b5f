"""The extraction domain: determinism, documents and distractors, gold and negative controls."""
from __future__ import annotations

import json

import pytest

from rlvr.domains.extraction.verifier import ExtractionVerifier
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.verify.base import VerifyContext

VERIFIER = ExtractionVerifier(VerifyContext())


def test_rebuilt_exactly_from_seed_and_index() -> None:
    a, b = registry.make("extraction", seed=1), registry.make("extraction", seed=1)
    assert a.size is None and [a.get(i) for i in range(9)] == [b.get(i) for i in range(9)]
    assert a.get(0).prompt != registry.make("extraction", seed=2).get(0).prompt


def test_documents_and_distractors_by_tier() -> None:
    easy = registry.make("extraction", tier="easy", document="income_statement").get(0)
    hard = registry.make("extraction", tier="hard", document="income_statement").get(0)
    assert "in thousands of" not in easy.prompt and "FY" in easy.prompt
    assert "in thousands of" in hard.prompt and "restated" in hard.prompt
    assert hard.prompt.count("FY") == 2 and easy.prompt.count("FY") == 1  # a prior-year column distracts
    invoice = registry.make("extraction", tier="medium", document="invoice").get(0)
    assert "quotation" in invoice.prompt and "previous balance" in invoice.prompt
    assert {t.metadata["document"] for t in registry.make("extraction").sample(9)} == {
        "income_statement", "balance_sheet", "invoice"}


def test_hidden_truth_is_not_in_the_prompt_in_full_units() -> None:
    task = registry.make("extraction", tier="medium", document="balance_sheet").get(0)
    truth = json.loads(task.hidden["truth.json"])
    assert f"{truth['total_assets']:,.0f}" not in task.prompt  # the document states thousands


def test_gold_scores_one_and_negatives_zero() -> None:
    src = registry.make("extraction")
    for task in src.sample(45):
        verdict = VERIFIER.verify(task, src.gold(task))
        assert verdict.score == 1.0 and verdict.passed and not verdict.flags, verdict.checks
        negatives = src.negatives(task)
        assert {"empty_answer", "echoed_prompt", "wrong_period", "buried_among_wrong", "hedged_answers",
                "copied_example"} <= set(negatives)
        for name, final in negatives.items():
            assert VERIFIER.verify(task, final).score == 0.0, (task.metadata["document"], name)


def test_bad_settings() -> None:
    with pytest.raises(UserError, match="document"):
        registry.make("extraction", document="tax_return")
