"""The mesh domain: determinism, parts and tiers, and gold scripts and controls run through a real sandbox."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rlvr.domains.mesh.verifier import MeshVerifier
from rlvr.errors import UserError
from rlvr.sandbox import make_pool
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks import registry
from rlvr.verify.base import VerifyContext


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with make_pool(workers=1) as p:  # the isolated pool the verifier runs candidates in
        yield p


def test_rebuilt_exactly_from_seed_and_index() -> None:
    a, b = registry.make("mesh", seed=4), registry.make("mesh", seed=4)
    assert a.size is None and [a.get(i) for i in range(8)] == [b.get(i) for i in range(8)]
    assert a.get(0).prompt != registry.make("mesh", seed=5).get(0).prompt


def test_parts_tiers_and_specs() -> None:
    tasks = registry.make("mesh").sample(12)
    assert {t.metadata["part"] for t in tasks} == {"plate", "tube", "bracket", "blocks"}
    for t in tasks:
        spec = json.loads(t.hidden["spec.json"])
        assert spec["volume"] > 0 and len(spec["extents"]) == 3 and spec["bodies"] >= 1
        assert "spec" not in t.prompt and "out.stl" in t.prompt
    assert json.loads(registry.make("mesh", part="plate",
                                    tier="hard").get(0).hidden["spec.json"])["holes"] == 3
    assert json.loads(registry.make("mesh", part="blocks",
                                    tier="hard").get(0).hidden["spec.json"])["bodies"] == 4


@pytest.mark.parametrize("part", ["plate", "tube", "bracket", "blocks"])
def test_gold_script_scores_one(pool: SandboxPool, part: str) -> None:
    src = registry.make("mesh", part=part, tier="hard")
    task = src.get(0)
    verdict = MeshVerifier(VerifyContext(pool=pool)).verify(task, src.gold(task))
    assert verdict.score == 1.0 and verdict.passed, [c for c in verdict.checks if not c.passed]


def test_negative_controls_score_zero(pool: SandboxPool) -> None:
    src = registry.make("mesh", part="plate", tier="medium")
    task = src.get(1)
    verifier = MeshVerifier(VerifyContext(pool=pool))
    negatives = src.negatives(task)
    assert {"empty_answer", "echoed_prompt", "wrong_part", "buried_among_wrong",
            "hedged_answers"} <= set(negatives)
    for name, final in negatives.items():
        verdict = verifier.verify(task, final)
        assert verdict.score == 0.0 and not verdict.infra_error, name


def test_bad_settings() -> None:
    with pytest.raises(UserError, match="part"):
        registry.make("mesh", part="gear")
