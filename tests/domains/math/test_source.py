"""The math domain: generator determinism and tiers, the shipped JSONL pack, gold and negative controls."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.domains.math.source import BUILTIN_PACK, FAMILIES, MathSource, _evaluate
from rlvr.domains.math.verifier import MathVerifier
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.loaders import JsonlPack
from rlvr.verify.base import VerifyContext

VERIFIER = MathVerifier(VerifyContext())


def test_rebuilt_exactly_from_seed_and_index() -> None:
    a, b = registry.make("math", seed=5), registry.make("math", seed=5)
    assert a.size is None
    assert [a.get(i) for i in range(10)] == [b.get(i) for i in range(10)]
    assert a.get(3).prompt != registry.make("math", seed=6).get(3).prompt
    assert a.get(3).source == "math:5:3" and a.get(3).id == "s5-3"


def test_every_family_and_tier_appears_and_tier_setting_holds() -> None:
    src = registry.make("math")
    tasks = src.sample(60)
    assert {t.metadata["family"] for t in tasks} == set(FAMILIES)
    assert {t.tier for t in tasks} == {"easy", "medium", "hard"}
    assert {t.tier for t in registry.make("math", tier="hard").sample(10)} == {"hard"}


def test_arithmetic_precedence() -> None:
    assert _evaluate([2, 3, 4], ["+", "\\cdot"]) == 14
    assert _evaluate([10, 2, 3, 4], ["-", "\\cdot", "-"]) == 0


@pytest.mark.parametrize("pack", [None, "builtin"])
def test_gold_scores_one_and_negatives_zero(pack: str | None) -> None:
    src = registry.make("math", pack=pack) if pack else registry.make("math")
    for task in src.sample(20 if pack else 40):
        assert VERIFIER.verify(task, src.gold(task)).score == 1.0, task.answer
        negatives = src.negatives(task)
        assert {"empty_answer", "echoed_prompt", "wrong_answer", "buried_answer",
                "hedged_answers"} <= set(negatives)
        for name, final in negatives.items():
            assert VERIFIER.verify(task, final).score == 0.0, (task.answer, name)


def test_builtin_pack_loads_through_the_generic_jsonl_loader() -> None:
    pack = JsonlPack(BUILTIN_PACK)
    assert pack.size >= 20
    task = pack.get(0)
    assert task.domain == "math" and registry.verifier_kind(task.domain) == "math"
    assert VERIFIER.verify(task, pack.gold(task)).score == 1.0


def test_bad_inputs_raise_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="tier"):
        registry.make("math", tier="impossible")
    with pytest.raises(UserError, match="jsonl"):
        registry.make("math", pack=str(tmp_path / "pack.txt"))
    with pytest.raises(UserError, match="no such JSONL"):
        registry.make("math", pack=str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "p.jsonl"
    bad.write_text(json.dumps({"prompt": "1+1?"}) + "\n{not json\n")
    src = registry.make("math", pack=str(bad))
    with pytest.raises(UserError, match="without an answer"):
        src.get(0)
    with pytest.raises(UserError, match=r"p.jsonl:2"):
        src.get(1)
    with pytest.raises(UserError, match="negative index"):
        MathSource(registry.entry("math").settings()).get(-1)
