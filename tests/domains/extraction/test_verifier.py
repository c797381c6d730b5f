"""Extraction verification: field credit with tolerances, business rules, gates and integrity flags."""
from __future__ import annotations

import json
from typing import Any

import pytest

from rlvr.domains.extraction.verifier import ExtractionVerifier, close
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext

VERIFIER = ExtractionVerifier(VerifyContext())


def _task(document: str = "income_statement", tier: str = "medium") -> Task:
    return registry.make("extraction", document=document, tier=tier).get(0)


def _verify(task: Task, doc: Any) -> Any:
    return VERIFIER.verify(task, FinalState(answer=f"<answer>{json.dumps(doc)}</answer>"))


def test_tolerance() -> None:
    assert close(1_000_000.0, 1_000_000.9) and not close(1_000_000.0, 1_000_002.0)
    assert close(10.004, 10.0) and not close(10.02, 10.0)


def test_field_level_partial_credit() -> None:
    task = _task()
    doc = json.loads(task.answer)
    doc["net_income"] += 50_000  # one of six money fields wrong; the rules do not involve it
    verdict = _verify(task, doc)
    assert verdict.score == pytest.approx(5 / 6) and not verdict.passed


def test_broken_business_rule_scales_the_score() -> None:
    task = _task(document="balance_sheet")
    doc = json.loads(task.answer)
    doc["total_equity"] += 7000  # field wrong, and assets no longer equal liabilities + equity
    verdict = _verify(task, doc)
    assert verdict.score == pytest.approx(3 / 4 * 1 / 2)
    assert any(c.name == "rule:balance" and not c.passed for c in verdict.checks)


def test_identity_gates() -> None:
    task = _task(document="invoice")
    doc = json.loads(task.answer)
    assert _verify(task, {**doc, "currency": "JPY"}).score == 0.0
    assert _verify(task, {**doc, "invoice_number": "Q-" + doc["invoice_number"][4:]}).score == 0.0
    assert _verify(task, {**doc, "currency": doc["currency"].lower()}).score == 1.0


def test_unsupported_value_is_flagged() -> None:
    task = _task()
    doc = json.loads(task.answer)
    doc["revenue"] = 123_456_789.0
    verdict = _verify(task, doc)
    assert [f.kind for f in verdict.flags] == ["unsupported_value"] and not verdict.passed


def test_misread_units_are_wrong_but_not_unsupported() -> None:
    task = _task()
    doc = {k: v / 1000 if isinstance(v, float) else v for k, v in json.loads(task.answer).items()}
    verdict = _verify(task, doc)
    assert verdict.score == 0.0 and not verdict.flags
    assert any(c.name == "rule:units" and not c.passed for c in verdict.checks)


def test_copied_example_is_flagged() -> None:
    task = _task()
    src = registry.make("extraction", document="income_statement", tier="medium")
    verdict = VERIFIER.verify(task, src.negatives(task)["copied_example"])
    assert "copied_example" in [f.kind for f in verdict.flags] and verdict.score == 0.0


@pytest.mark.parametrize("response", ["", "<answer>[]</answer>", "<answer>{\"revenue\": NaN}</answer>",
                                      "<answer>{\"revenue\": \"87,463\"}</answer>", "<answer>1e999</answer>"])
def test_malformed_answers(response: str) -> None:
    assert VERIFIER.verify(_task(), FinalState(answer=response)).score == 0.0


def test_string_numbers_and_booleans_are_not_money() -> None:
    task = _task(document="invoice", tier="easy")
    doc = json.loads(task.answer)
    assert _verify(task, {**doc, "subtotal": str(doc["subtotal"])}).score < 1.0
    assert _verify(task, {**doc, "tax": True}).score < 1.0


def test_missing_truth_is_an_infra_error() -> None:
    task = _task().model_copy(update={"hidden": {}})
    assert VERIFIER.verify(task, FinalState(answer="<answer>{}</answer>")).infra_error
