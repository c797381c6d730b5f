"""Strict reasoning-gym scoring: exact answers only, lenient package scorers neutralised."""
from __future__ import annotations

import pytest

from rlvr.domains.reasoning_gym.source import dataset, entry_of
from rlvr.domains.reasoning_gym.verifier import GUARDS, ReasoningGymVerifier, scorer_is_strict
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState
from rlvr.verify.base import VerifyContext

VERIFIER = ReasoningGymVerifier(VerifyContext())


def _score(domain: str, index: int, answer: str) -> float:
    src = registry.make(domain, size=20)
    return VERIFIER.verify(src.get(index), FinalState(answer=answer)).score


def test_gold_with_reasoning_scores_one() -> None:
    task = registry.make("rg-gcd", size=20).get(1)
    assert _score("rg-gcd", 1, f"<think>Euclid says...</think>\n<answer>{task.answer}</answer>") == 1.0


def test_package_partial_credit_is_not_counted() -> None:
    task = registry.make("rg-basic_arithmetic", size=20).get(0)
    src_score = dataset("basic_arithmetic", 0, 20, {}).score_answer(f"x {task.answer} y", entry_of(task))
    assert 0.0 < src_score < 1.0  # the package gives partial credit for containing the answer
    verdict = VERIFIER.verify(task, FinalState(answer=f"<answer>x {task.answer} y</answer>"))
    assert verdict.score == 0.0 and verdict.details["package_score"] == pytest.approx(src_score)


@pytest.mark.parametrize("name", sorted(GUARDS))
def test_every_guarded_dataset_is_really_lenient_or_needs_the_guard(name: str) -> None:
    """The guard table is not dead weight: each guarded scorer accepts something it should not."""
    src = registry.make(f"rg-{name}", size=20)
    task = src.get(0)
    entry = entry_of(task)
    ds = dataset(name, 0, 20, {})
    gold = src.reference(task)
    attacks = [f"none of these\n{gold}\nnone of these", f"0\n{gold}", "1*2*3*4", "24", "blah " + gold]
    assert any(_accepts(ds, a, entry) for a in attacks) or not scorer_is_strict(ds, entry, gold)[0]
    for attack in attacks:
        if attack.strip() != gold.strip():
            assert VERIFIER.verify(task, FinalState(answer=f"<answer>{attack}</answer>")).score == 0.0, attack


def _accepts(ds: object, answer: str, entry: dict) -> bool:
    try:
        return float(ds.score_answer(answer, entry)) >= 1.0  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return False


def test_puzzle24_expression_with_other_numbers_is_rejected() -> None:
    task = registry.make("rg-puzzle24", size=20).get(0)
    assert _score("rg-puzzle24", 0, "<answer>6*4*1*1</answer>") == 0.0 or sorted(
        task.metadata.get("numbers", [])) == [1, 1, 4, 6]
    assert _score("rg-puzzle24", 0, f"<answer>{task.answer}</answer>") == 1.0


def test_alternative_valid_answer_counts_where_scorer_is_strict() -> None:
    """countdown has many right expressions; a reordered one is accepted by the strict scorer path."""
    task = registry.make("rg-countdown", size=20).get(0)
    terms = task.answer.split(" + ")
    if len(terms) > 1:
        alt = " + ".join(reversed(terms))
        assert _score("rg-countdown", 0, f"<answer>{alt}</answer>") == 1.0


def test_game_of_life_halting_needs_the_exact_word() -> None:
    task = registry.make("rg-game_of_life_halting", size=20).get(0)
    wrong = "True" if task.answer == "False" else "False"
    assert _score("rg-game_of_life_halting", 0, f"<answer>{wrong}</answer>") == 0.0
    assert _score("rg-game_of_life_halting", 0, f"<answer>{task.answer}</answer>") == 1.0


def test_echoed_question_is_flagged_as_parroting() -> None:
    task = registry.make("rg-gcd", size=20).get(0)
    verdict = VERIFIER.verify(task, FinalState(answer=str(entry_of(task)["question"])))
    assert verdict.score == 0.0 and [f.kind for f in verdict.flags] == ["parroting"]


def test_hostile_answer_cannot_take_the_verifier_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """countdown's scorer hands the answer to sympy; a power tower would eat the process without the guard."""
    from rlvr.verify import guard as answer

    monkeypatch.setattr(answer, "GUARD_TIMEOUT_S", 2.0)
    task = registry.make("rg-countdown", size=20).get(0)
    verdict = VERIFIER.verify(task, FinalState(answer="<answer>9**9**9**9</answer>"))
    assert verdict.score == 0.0 and not verdict.infra_error
