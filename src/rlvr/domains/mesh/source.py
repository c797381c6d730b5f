"""3D modelling: the model writes a Python script that builds a part with `trimesh` and exports it.

The script runs in the sandbox and must write `out.stl` (or `out.ply` / `out.obj`) in its working directory;
the verifier loads that file in its own process and checks the geometry against `hidden/spec.json`
(watertight, consistent winding, bodies, volume, bounding box, through-holes). Parts: plates with holes,
tubes, L-brackets (with a hole in the hard tier) and sets of separate blocks. Dimensions are millimetres.
Task `i` is built from `Random(seed + i)`.
"""
from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rlvr.tasks.prompts import fenced
from rlvr.tasks.source import ProceduralSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits

TIERS = ("easy", "medium", "hard")
SECTIONS = 64
"""Facets of the reference cylinders; the tolerances below absorb the polygonal approximation."""
INSTRUCTION = ("Write one Python script that builds this part with the `trimesh` library (booleans work: "
               "`a.difference(b)`, `a.union(b)`) and exports it with `mesh.export(\"out.stl\")` in "
               "the current directory. Units are millimetres. Put the whole script inside "
               "<answer></answer> tags, optionally in a ```python fenced block.")


class MeshConfig(BaseModel):
    """Settings of the `mesh` domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the generator; task i is built from Random(seed + i)."""
    tier: Literal["easy", "medium", "hard"] | None = None
    """Difficulty tier (number of holes or blocks, extra features); None cycles by index."""
    part: Literal["plate", "tube", "bracket", "blocks"] | None = None
    """Only one kind of part; None cycles through them."""


Part = tuple[str, str, dict[str, Any], str]
"""(brief, gold script, spec, wrong-but-plausible script)."""


def _spec(volume: float, extents: list[float], bodies: int, holes: int) -> dict[str, Any]:
    return {"volume": round(volume, 3), "extents": [round(e, 3) for e in extents], "bodies": bodies,
            "holes": holes, "volume_rel_tol": 0.02, "extent_abs_tol": 0.05}


def _polygon_area(r: float) -> float:
    """Area of the SECTIONS-gon inscribed in a circle of radius r (what trimesh's cylinder really is)."""
    return 0.5 * SECTIONS * r * r * math.sin(2 * math.pi / SECTIONS)


def _wrong(spec: dict[str, Any]) -> str:
    """A clean part of the wrong size with the wrong number of holes (and bodies when more than one is
    asked)."""
    x, y, z = (e * 1.5 for e in spec["extents"])
    if spec["holes"]:
        return f"import trimesh\ntrimesh.creation.box(extents=[{x}, {y}, {z}]).export('out.stl')\n"
    return (f"import trimesh\nm = trimesh.creation.annulus(r_min={min(x, y) / 6}, r_max={min(x, y) / 2}, "
            f"height={z}, sections={SECTIONS})\nm.export('out.stl')\n")


def _plate(rng: random.Random, tier: str) -> Part:
    length, width, thick = rng.randint(30, 90), rng.randint(20, 50), rng.randint(3, 10)
    holes = {"easy": 1, "medium": 2, "hard": 3}[tier]
    d = rng.randint(4, max(5, min(width // 2, length // (2 * holes))))
    pitch = length / (holes + 1)
    xs = [round(-length / 2 + pitch * (k + 1), 3) for k in range(holes)]
    brief = (f"A rectangular plate {length} mm long (x), {width} mm wide (y) and {thick} mm thick (z), "
             f"centred on the origin, with {holes} round through-hole{'s' * (holes > 1)} of diameter {d} mm "
             f"along z, centred on y = 0 at x = {', '.join(f'{x:g}' for x in xs)} mm.")
    script = (f"import trimesh\nplate = trimesh.creation.box(extents=[{length}, {width}, {thick}])\n"
              f"for x in {xs}:\n    hole = trimesh.creation.cylinder(radius={d / 2}, height={thick * 3}, "
              f"sections={SECTIONS})\n    hole.apply_translation([x, 0, 0])\n    plate = "
              f"plate.difference(hole)\n"
              "plate.export('out.stl')\n")
    volume = length * width * thick - holes * _polygon_area(d / 2) * thick
    spec = _spec(volume, [length, width, thick], 1, holes)
    return brief, script, spec, _wrong(spec)


def _tube(rng: random.Random, tier: str) -> Part:
    r_out = rng.randint(8, 30)
    r_in = rng.randint(3, r_out - 2)
    height = rng.randint(10, 80)
    brief = (f"A tube (hollow cylinder) along z with outer diameter {2 * r_out} mm, inner diameter "
             f"{2 * r_in} mm and length {height} mm, centred on the origin.")
    script = (f"import trimesh\ntube = trimesh.creation.annulus(r_min={r_in}, r_max={r_out}, "
              f"height={height}, sections={SECTIONS})\ntube.export('out.stl')\n")
    volume = (_polygon_area(r_out) - _polygon_area(r_in)) * height
    spec = _spec(volume, [2 * r_out, 2 * r_out, height], 1, 1)
    spec["extent_abs_tol"] = round(2 * r_out * (1 - math.cos(math.pi / SECTIONS)) + 0.05, 3)
    return brief, script, spec, _wrong(spec)


def _bracket(rng: random.Random, tier: str) -> Part:
    length, width, thick = rng.randint(30, 70), rng.randint(15, 40), rng.randint(3, 8)
    height = rng.randint(20, 60)
    hole = tier == "hard"
    d = rng.randint(3, max(4, min(width, height - thick) // 2)) if hole else 0
    brief = (f"An L-shaped bracket: a base plate {length} mm (x) by {width} mm (y) by {thick} mm (z) "
             f"lying on z = 0 from x = 0 to x = {length} and y = 0 to y = {width}, and an upright wall "
             f"{thick} mm thick standing on its end x = 0 to x = {thick}, full width, reaching z = {height} "
             f"mm. The two are one solid.")
    script = (f"import trimesh\nbase = trimesh.creation.box(extents=[{length}, {width}, {thick}])\n"
              f"base.apply_translation([{length / 2}, {width / 2}, {thick / 2}])\n"
              f"wall = trimesh.creation.box(extents=[{thick}, {width}, {height}])\n"
              f"wall.apply_translation([{thick / 2}, {width / 2}, {height / 2}])\npart = base.union(wall)\n")
    volume = length * width * thick + thick * width * (height - thick)
    if hole:
        zc = round((thick + height) / 2, 3)
        brief += (f" The wall has a round through-hole of diameter {d} mm along x, centred at y = "
                  f"{width / 2:g}, z = {zc:g}.")
        script += (f"hole = trimesh.creation.cylinder(radius={d / 2}, height={thick * 3}, "
                   f"sections={SECTIONS})\n"
                   f"hole.apply_transform(trimesh.transformations.rotation_matrix(1.5707963267948966, "
                   f"[0, 1, 0]))\n"
                   f"hole.apply_translation([{thick / 2}, {width / 2}, {zc}])\npart = "
                   f"part.difference(hole)\n")
        volume -= _polygon_area(d / 2) * thick
    script += "part.export('out.stl')\n"
    spec = _spec(volume, [length, width, height], 1, int(hole))
    return brief, script, spec, _wrong(spec)


def _blocks(rng: random.Random, tier: str) -> Part:
    count = {"easy": 2, "medium": 3, "hard": 4}[tier]
    size, gap = rng.randint(5, 20), rng.randint(2, 10)
    brief = (f"{count} separate cubes of side {size} mm in a row along x with a gap of {gap} mm between "
             f"neighbours, all sitting on z = 0 with their y centred on 0; the first cube spans x = 0 to x = "
             f"{size}. Export "
             "them together as one mesh file.")
    script = (f"import trimesh\ncubes = []\nfor k in range({count}):\n"
              f"    c = trimesh.creation.box(extents=[{size}, {size}, {size}])\n"
              f"    c.apply_translation([{size / 2} + k * {size + gap}, 0, {size / 2}])\n    "
              f"cubes.append(c)\n"
              "trimesh.util.concatenate(cubes).export('out.stl')\n")
    spec = _spec(count * size**3, [count * size + (count - 1) * gap, size, size], count, 0)
    wrong = (f"import trimesh\ntrimesh.creation.annulus(r_min={size / 4}, r_max={size}, height={size * 2}, "
             f"sections={SECTIONS}).export('out.stl')\n")
    return brief, script, spec, wrong


PARTS: dict[str, Callable[[random.Random, str], Part]] = {
    "blocks": _blocks, "bracket": _bracket, "plate": _plate, "tube": _tube}


class MeshSource(ProceduralSource):
    """Generated 3D modelling tasks, rebuilt exactly from (seed, index)."""

    name = "mesh"
    config: MeshConfig

    def build(self, index: int, rng: random.Random) -> Task:
        tier = self.config.tier or TIERS[index % len(TIERS)]
        part = self.config.part or sorted(PARTS)[(index // len(TIERS)) % len(PARTS)]
        brief, script, spec, wrong = PARTS[part](rng, tier)
        return Task(id=self.id_at(index), domain="mesh", prompt=f"{brief}\n\n{INSTRUCTION}", answer=script,
                    hidden={"spec.json": json.dumps(spec), "wrong.py": wrong}, tier=tier,
                    difficulty=TIERS.index(tier) / 2,
                    limits=TaskLimits(max_tokens=1024, exec_timeout_s=30.0, memory_mb=1024),
                    metadata={"part": part}, source=f"mesh:{self.config.seed}:{index}",
                    seed=self.config.seed, index=index)

    def gold(self, task: Task) -> FinalState:
        return FinalState(answer=fenced(str(task.answer)))

    def negatives(self, task: Task) -> dict[str, FinalState]:
        wrong = task.hidden["wrong.py"]
        both = (str(task.answer).replace("export('out.stl')", "export('gold.stl')")
                + wrong.replace("export('out.stl')", "export('wrong.stl')")
                + "import trimesh\ntrimesh.util.concatenate([trimesh.load('gold.stl'), "
                  "trimesh.load('wrong.stl')]).export('out.stl')\n")
        return {
            **super().negatives(task),
            "wrong_part": FinalState(answer=fenced(wrong)),
            "buried_among_wrong": FinalState(answer=fenced(both)),
            "hedged_answers": FinalState(answer=fenced(wrong) + "\n" + fenced(str(task.answer))),
            "no_export": FinalState(answer=fenced(str(task.answer).replace(".export('out.stl')", ""))),
        }
