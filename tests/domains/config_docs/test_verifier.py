"""Config verification: schema, structural gates, credit per rule, hostile JSON."""
from __future__ import annotations

import json
from typing import Any

import pytest

from rlvr.domains.config_docs.verifier import ConfigVerifier
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.extract import parse_json_answer

VERIFIER = ConfigVerifier(VerifyContext())


def _task(kind: str = "deployment", tier: str = "medium") -> Task:
    return registry.make("config", kind=kind, tier=tier).get(0)


def _score(task: Task, doc: Any) -> float:
    return VERIFIER.verify(task, FinalState(answer=f"<answer>{json.dumps(doc)}</answer>")).score


def test_partial_credit_per_service() -> None:
    task = _task()
    doc = json.loads(task.answer)
    first = min(doc["services"])
    doc["services"][first]["image"] = "other:1"
    n = len(doc["services"])
    assert _score(task, doc) == pytest.approx(n / (n + 1))  # one of n services wrong, memory budget still met


def test_partial_credit_per_stage_and_order_rule() -> None:
    task = _task("pipeline", "hard")
    doc = json.loads(task.answer)
    needy = next(s for s in doc["stages"] if s["needs"])
    doc["stages"].remove(needy)
    doc["stages"].insert(0, needy)  # before the stages it needs
    score = _score(task, doc)
    assert 0.0 < score < 1.0


@pytest.mark.parametrize("mutate,gate", [
    (lambda d, a, b: d["services"][b].update(port=d["services"][a]["port"]), "unique_ports"),
    (lambda d, a, b: d["services"][a].update(depends_on=["ghost"]), "references_resolve"),
    (lambda d, a, b: (d["services"][a].update(depends_on=[b]), d["services"][b].update(depends_on=[a])),
     "acyclic"),
    (lambda d, a, b: d["services"].update(extra=dict(d["services"][a], port=1)), "only_requested_services"),
    (lambda d, a, b: d["services"][a].update(port="80"), "schema"),
    (lambda d, a, b: d["services"][a].update(surprise=True), "schema"),
])
def test_structural_gates_zero_the_score(mutate: Any, gate: str) -> None:
    task = _task()
    doc = json.loads(task.answer)
    a, b = sorted(doc["services"])[:2]
    mutate(doc, a, b)
    verdict = VERIFIER.verify(task, FinalState(answer=f"<answer>{json.dumps(doc)}</answer>"))
    assert verdict.score == 0.0 and not verdict.passed
    assert any(c.name == f"gate:{gate}" and not c.passed for c in verdict.checks)


def test_pipeline_gates() -> None:
    task = _task("pipeline")
    doc = json.loads(task.answer)
    doc["stages"].append(dict(doc["stages"][0]))
    assert _score(task, doc) == 0.0


@pytest.mark.parametrize("response", ["<answer>{not json}</answer>", "<answer>" + "[" * 100_000 + "</answer>",
                                      "<answer>[1, 2]</answer>", "<answer>null</answer>", "no tags {}",
                                      "<answer>" + "x" * 300_000 + "</answer>"])
def test_hostile_or_malformed_answers_score_zero(response: str) -> None:
    assert VERIFIER.verify(_task(), FinalState(answer=response)).score == 0.0


def test_fenced_json_inside_tags_is_accepted() -> None:
    task = _task()
    assert VERIFIER.verify(task,
                           FinalState(answer=f"<answer>```json\n{task.answer}\n```</answer>")).score == 1.0
    assert parse_json_answer("<answer>{\"a\": 1}</answer>") == ({"a": 1}, "")


def test_broken_task_material_is_an_infra_error() -> None:
    task = _task().model_copy(update={"hidden": {"schema.json": "{", "requirements.json": "{}"}})
    verdict = VERIFIER.verify(task, FinalState(answer="<answer>{}</answer>"))
    assert verdict.infra_error
