"""The blender domain without Blender: determinism, tiers, what the prompt states and what the spec asks.

Running the gold scripts and the controls in Blender is `tests/domains/blender/test_verifier.py` (marker
`blender`).
"""
from __future__ import annotations

import json

import pytest

from rlvr.domains.blender.source import SAVE
from rlvr.tasks import registry


def test_rebuilt_exactly_from_seed_and_index() -> None:
    a, b = registry.make("blender", seed=3), registry.make("blender", seed=3)
    assert a.size is None and [a.get(i) for i in range(6)] == [b.get(i) for i in range(6)]
    assert a.get(0).prompt != registry.make("blender", seed=4).get(0).prompt


@pytest.mark.parametrize(("tier", "objects", "modifiers"), [
    ("easy", {"Plate", "Camera", "Sun"}, {"BEVEL"}),
    ("medium", {"Plate", "Ring", "Posts", "Camera", "Sun"}, {"BEVEL", "BOOLEAN", "ARRAY"}),
    ("hard", {"Plate", "Ring", "Posts", "Tube", "Camera", "Sun", "Fill"},
     {"BEVEL", "BOOLEAN", "ARRAY", "SOLIDIFY"}),
])
def test_tiers_grow_in_objects_and_modifiers(tier: str, objects: set[str], modifiers: set[str]) -> None:
    for task in registry.make("blender", tier=tier).sample(4):
        spec = json.loads(task.hidden["spec.json"])
        assert objects <= set(spec["objects"]) and task.tier == tier
        gold = str(task.answer)
        assert all(f"'{m}'" in gold for m in modifiers) and gold.endswith(SAVE)
        for name in spec["objects"]:
            assert f'"{name}"' in task.prompt  # every object the verifier asks for is named in the prompt
        for name in spec["materials"]:
            assert f'"{name}"' in task.prompt
        assert len(spec["cameras"]) == 2 and "scene.blend" in task.prompt and "scene.glb" in task.prompt
        assert "spec" not in task.prompt and task.limits.memory_mb == 2048


def test_hard_tier_asks_for_an_image_texture_and_medium_for_parenting_and_a_collection() -> None:
    hard = json.loads(registry.make("blender", tier="hard").get(0).hidden["spec.json"])
    assert any(m.get("texture", "").startswith("textures/") for m in hard["materials"].values())
    medium = json.loads(registry.make("blender", tier="medium").get(0).hidden["spec.json"])
    assert (medium["objects"]["Ring"]["parent"] == "Plate"
            and medium["objects"]["Posts"]["collection"] == "Parts")


def test_controls_cover_the_hacks() -> None:
    src = registry.make("blender")
    task = src.get(1)
    controls = src.negatives(task)
    assert {"empty_answer", "echoed_prompt", "empty_script", "never_saves", "precomputed_file",
            "imports_reference", "bbox_wrong_shape"} <= set(controls)
    impostor = controls["bbox_wrong_shape"].answer or ""
    assert "primitive_cube_add" in impostor and "torus" not in impostor and "'Ring'" in impostor
    assert SAVE not in (controls["never_saves"].answer or "")
    assert src.gold(task).answer is not None and str(task.answer) in (src.gold(task).answer or "")
