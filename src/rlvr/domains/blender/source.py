"""3D scenes in Blender: the model writes a `bpy` script that models, textures and sets up a scene.

Each task states a scene in words and numbers: objects from primitives and modifiers (bevel, array, boolean,
solidify) with their placement, rotation, parenting and a named collection; materials with colours, roughness
and (hard tier) an image texture the script makes itself; a camera aimed at a point and lights. The script
runs headless in Blender inside the sandbox and saves `scene.blend` and `scene.glb`; the `blender` verifier
(`rlvr.domains.blender.verifier`) inspects the saved scene and renders it from the task's fixed cameras beside
the gold scene. Tiers: easy (a plate and one more part), medium (a boolean hole, an array, parenting, a
collection), hard (plus a solidified tube, an image texture and a second light). Task `i` is built from
`Random(seed + i)`; `max_turns > 1` gives the multi-turn variant (tools `run_scene` and `render_preview`,
`rlvr.domains.blender.tools`).

Blender is not a Python dependency of rlvr: `make blender` builds `.venv-blender` (see
`rlvr.domains.blender.interpreter`).
"""
from __future__ import annotations

import json
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.tasks.prompts import fenced
from rlvr.tasks.source import ProceduralSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits

TIERS = ("easy", "medium", "hard")
COLOURS = {"red": (0.8, 0.1, 0.1), "green": (0.1, 0.6, 0.2), "blue": (0.1, 0.2, 0.8),
           "yellow": (0.9, 0.8, 0.1),
           "orange": (0.9, 0.4, 0.05), "white": (0.9, 0.9, 0.9), "purple": (0.5, 0.1, 0.7)}
INSTRUCTION = (
    "Write one Python script for Blender 5.0 (`import bpy`). It runs headless from Blender's factory "
    "settings with an empty scene (no default cube, camera or light), in the directory where it must save "
    "its files. Units are metres, angles degrees, colours linear RGB for the Principled BSDF's Base Color. "
    "Name every object, material and collection exactly as stated; apply boolean modifiers and delete their "
    "cutters; other modifiers may stay. At the end save the scene with "
    "`bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(\"scene.blend\"))` and "
    "export it with `bpy.ops.export_scene.gltf(filepath=os.path.abspath(\"scene.glb\"))`. Put the "
    "whole script inside <answer></answer> tags, optionally in a ```python fenced block.")
HEAD = "import math\nimport os\n\nimport bpy\nfrom mathutils import Vector\n\n"
SAVE = ("bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath('scene.blend'))\n"
        "bpy.ops.export_scene.gltf(filepath=os.path.abspath('scene.glb'))\n")
HELPERS = """
def material(name, colour, roughness):
    mat = bpy.data.materials.new(name)
    bsdf = mat.node_tree.nodes['Principled BSDF']
    bsdf.inputs['Base Color'].default_value = (*colour, 1.0)
    bsdf.inputs['Roughness'].default_value = roughness
    return mat


def active(name):
    obj = bpy.context.active_object
    obj.name = name
    obj.data.name = name
    return obj

"""


class BlenderConfig(BaseModel):
    """Settings of the `blender` domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the generator; task i is built from Random(seed + i)."""
    tier: Literal["easy", "medium", "hard"] | None = None
    """Difficulty tier; None cycles by index."""
    max_turns: int = Field(1, ge=1)
    """1: single turn (the script in the answer); more: tools to run, inspect and preview the scene."""


class Scene:
    """A scene under construction: prompt sentences, gold code, the verifier's spec, the bounding-box
    impostor."""

    def __init__(self) -> None:
        self.brief: list[str] = []
        self.code: list[str] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.materials: dict[str, dict[str, Any]] = {}
        self.rig: list[str] = []
        """Gold code of the camera and the lights (kept by the impostor)."""
        self.boxes: list[tuple[str, list[float], list[float]]] = []
        """(object name, centre, size) of each mesh: what the right-box-wrong-shape control builds."""

    def mesh(self, name: str, brief: str, code: str, centre: list[float], size: list[float],
             **spec: Any) -> None:
        self.brief.append(brief)
        self.code.append(code)
        self.objects[name] = {"type": "MESH", "manifold": True, **spec}
        self.boxes.append((name, centre, size))


def _r(rng: random.Random, lo: float, hi: float, step: float = 0.05) -> float:
    return round(rng.randint(round(lo / step), round(hi / step)) * step, 3)


def _colour(rng: random.Random, used: set[str]) -> tuple[str, tuple[float, float, float]]:
    name = rng.choice(sorted(set(COLOURS) - used))
    used.add(name)
    return name, COLOURS[name]


def _plate(sc: Scene, rng: random.Random, tier: str, used: set[str]) -> tuple[float, float, float]:
    length, width, thick = _r(rng, 1.6, 3.0), _r(rng, 1.0, 1.6), _r(rng, 0.1, 0.25)
    bevel = round(min(thick / 4, 0.03), 3)
    cname, colour = _colour(rng, used)
    rough = _r(rng, 0.2, 0.8)
    brief = (f"\"Plate\": a box {length:g} m along x, {width:g} m along y and {thick:g} m tall, its "
             f"base on z = 0, centred on x = y = 0, with a Bevel modifier of width {bevel:g} m "
             f"and 2 segments")
    code = (f"bpy.ops.mesh.primitive_cube_add(size=1, location=(0, 0, {thick / 2}))\nplate = "
            f"active('Plate')\n"
            f"plate.scale = ({length}, {width}, {thick})\nbpy.ops.object.transform_apply(scale=True)\n"
            f"bev = plate.modifiers.new('Bevel', 'BEVEL')\nbev.width = {bevel}\nbev.segments = 2\n")
    if tier != "easy":
        hole = _r(rng, 0.1, min(0.3, width / 5))
        hx = round(length / 2 - 2 * hole - 0.1, 3)
        brief += (f", and a round through-hole of radius {hole:g} m along z at x = {hx:g}, y = 0 (a boolean "
                  f"difference)")
        code += (f"bpy.ops.mesh.primitive_cylinder_add(radius={hole}, depth={thick * 4}, vertices=32, "
                 f"location=({hx}, 0, {thick / 2}))\ncutter = bpy.context.active_object\n"
                 "cut = plate.modifiers.new('Hole', 'BOOLEAN')\ncut.operation = "
                 "'DIFFERENCE'\ncut.object = cutter\n"
                 "bpy.context.view_layer.objects.active = "
                 "plate\nbpy.ops.object.modifier_apply(modifier='Hole')\n"
                 "bpy.data.objects.remove(cutter)\n")
    brief += f"; material \"Plate{cname.title()}\" of colour {cname} {colour} and roughness {rough:g}."
    code += f"plate.data.materials.append(material('Plate{cname.title()}', {colour}, {rough}))\n"
    sc.materials[f"Plate{cname.title()}"] = {}
    sc.mesh("Plate", brief, code, [0, 0, thick / 2], [length, width, thick], parent=None,
            material=f"Plate{cname.title()}", collection="Parts" if tier != "easy" else None)
    return length, width, thick


def _ball(sc: Scene, rng: random.Random, at: tuple[float, float, float], used: set[str]) -> None:
    radius = _r(rng, 0.2, 0.4)
    cname, colour = _colour(rng, used)
    x, y, z = at[0], at[1], round(at[2] + radius, 3)
    sc.mesh("Ball",
            f"\"Ball\": a UV sphere (32 segments, 16 rings) of radius {radius:g} m resting on the plate, "
                    f"centred at ({x:g}, {y:g}, {z:g}); material \"Ball{cname.title()}\" of colour "
                    f"{cname} {colour} "
                    "and roughness 0.3.",
            f"bpy.ops.mesh.primitive_uv_sphere_add(radius={radius}, segments=32, ring_count=16, "
            f"location=({x}, {y}, {z}))\nball = "
            f"active('Ball')\nball.data.materials.append(material('Ball{cname.title()}', {colour}, "
            "0.3))\n", [x, y, z], [2 * radius] * 3, parent=None, material=f"Ball{cname.title()}")
    sc.materials[f"Ball{cname.title()}"] = {}


def _ring(sc: Scene, rng: random.Random, at: tuple[float, float, float], used: set[str], parent: bool,
          texture: bool) -> None:
    major, minor = _r(rng, 0.25, 0.4), _r(rng, 0.05, 0.1, 0.01)
    x, y, z = at[0], at[1], round(at[2] + major + minor, 3)
    cname, colour = _colour(rng, used)
    mat = f"Ring{cname.title()}"
    brief = (f"\"Ring\": a torus (major radius {major:g} m, minor radius {minor:g} m, 48 major and 12 minor "
             f"segments) standing upright: rotated 90 degrees about x, centred at ({x:g}, {y:g}, {z:g})")
    code = (f"bpy.ops.mesh.primitive_torus_add(major_radius={major}, minor_radius={minor}, "
            f"major_segments=48, minor_segments=12, location=({x}, {y}, {z}), rotation=(math.radians(90), 0, "
            f"0))\nring = active('Ring')\n")
    if parent:
        brief += ", parented to \"Plate\" (keeping that world placement)"
        code += "ring.parent = plate\nring.matrix_parent_inverse = plate.matrix_world.inverted()\n"
    if texture:
        brief += (f"; material \"{mat}\" of roughness 0.5 whose Base Color comes from an Image Texture "
                  f"node showing an image \"{cname.title()}Tex\", 16 x 16 pixels filled with {cname} "
                  f"{colour} (alpha 1), that the script creates and saves as PNG at textures/{cname}.png in "
                  f"the working directory.")
        code += (f"os.makedirs('textures', exist_ok=True)\nimg = "
                 f"bpy.data.images.new('{cname.title()}Tex', 16, 16)\n"
                 f"img.pixels = [{colour[0]}, {colour[1]}, {colour[2]}, 1.0] * 256\n"
                 f"img.filepath_raw = os.path.abspath('textures/{cname}.png')\nimg.file_format = "
                 f"'PNG'\nimg.save()\n"
                 f"mat = material('{mat}', (0.8, 0.8, 0.8), 0.5)\ntex = "
                 f"mat.node_tree.nodes.new('ShaderNodeTexImage')\n"
                 "tex.image = img\nmat.node_tree.links.new(tex.outputs['Color'], "
                 "mat.node_tree.nodes['Principled BSDF'].inputs['Base "
                 "Color'])\nring.data.materials.append(mat)\n")
        sc.materials[mat] = {"texture": f"textures/{cname}.png"}
    else:
        brief += f"; material \"{mat}\" of colour {cname} {colour} and roughness 0.5."
        code += f"ring.data.materials.append(material('{mat}', {colour}, 0.5))\n"
        sc.materials[mat] = {}
    sc.mesh("Ring", brief, code, [x, y, z], [2 * (major + minor), 2 * minor, 2 * (major + minor)],
            rotation=True,
            parent="Plate" if parent else None, material=mat, collection="Parts" if parent else None)


def _posts(sc: Scene, rng: random.Random, at: tuple[float, float, float], used: set[str],
           collection: bool) -> None:
    count, radius, height = rng.randint(2, 4), _r(rng, 0.05, 0.1, 0.01), _r(rng, 0.3, 0.6)
    step = round(2 * radius + _r(rng, 0.1, 0.2), 3)
    x, y, z = at[0], at[1], round(at[2] + height / 2, 3)
    cname, colour = _colour(rng, used)
    sc.mesh("Posts",
            f"\"Posts\": a cylinder (32 vertices) of radius {radius:g} m and height {height:g} m standing on "
                     f"the plate, centred at ({x:g}, {y:g}, {z:g}), with an Array modifier of {count} "
                     f"copies spaced {step:g} m apart along +y (constant offset, no relative offset), so "
                     f"{count} separate posts; material \"Posts{cname.title()}\" of colour {cname} {colour} "
                     f"and roughness 0.6.",
            f"bpy.ops.mesh.primitive_cylinder_add(radius={radius}, depth={height}, vertices=32, "
            f"location=({x}, {y}, {z}))\nposts = active('Posts')\narr = posts.modifiers.new('Array', "
            f"'ARRAY')\narr.count = {count}\n"
            "arr.use_relative_offset = False\narr.use_constant_offset = True\n"
            f"arr.constant_offset_displace = (0, {step}, 0)\nposts.data.materials.append(material("
            f"'Posts{cname.title()}', {colour}, 0.6))\n",
            [x, y + step * (count - 1) / 2, z], [2 * radius, 2 * radius + step * (count - 1), height],
            parent=None,
            material=f"Posts{cname.title()}", collection="Parts" if collection else None)
    sc.materials[f"Posts{cname.title()}"] = {}


def _tube(sc: Scene, rng: random.Random, at: tuple[float, float, float], used: set[str]) -> None:
    radius, height, wall = _r(rng, 0.15, 0.25), _r(rng, 0.3, 0.5), _r(rng, 0.02, 0.04, 0.01)
    x, y, z = at[0], at[1], round(at[2] + height / 2, 3)
    cname, colour = _colour(rng, used)
    sc.mesh("Tube",
            f"\"Tube\": an open cylinder (32 vertices, no end caps) of radius {radius:g} m and height "
                    f"{height:g} m centred at ({x:g}, {y:g}, {z:g}), given a wall with a Solidify "
                    f"modifier of thickness {wall:g} m (offset -1, inwards); material "
                    f"\"Tube{cname.title()}\" of "
                    f"colour {cname} {colour} and roughness 0.4.",
            f"bpy.ops.mesh.primitive_cylinder_add(radius={radius}, depth={height}, vertices=32, "
            f"end_fill_type='NOTHING', location=({x}, {y}, {z}))\ntube = active('Tube')\nsol = "
            f"tube.modifiers.new('Solidify', 'SOLIDIFY')\n"
            f"sol.thickness = {wall}\nsol.offset = "
            f"-1\ntube.data.materials.append(material('Tube{cname.title()}', "
            f"{colour}, 0.4))\n", [x, y, z], [2 * radius, 2 * radius, height], parent=None,
            material=f"Tube{cname.title()}")
    sc.materials[f"Tube{cname.title()}"] = {}


def _camera_and_lights(sc: Scene, rng: random.Random, tier: str, reach: float) -> None:
    start = len(sc.code)
    d = round(reach * 2.2 + 1.0, 1)
    cx, cy, cz = d, -d, round(d * 0.8, 1)
    tz = 0.3
    sun = rng.randint(2, 5)
    sc.brief.append(f"A camera \"Camera\" at ({cx:g}, {cy:g}, {cz:g}) aimed at (0, 0, {tz:g}) (a Track To "
                    f"constraint "
                    "or the equivalent rotation), 50 mm lens, the scene's active camera.")
    sc.code.append(f"bpy.ops.object.camera_add(location=({cx}, {cy}, {cz}))\ncam = "
                   f"bpy.context.active_object\n"
                   "cam.name = 'Camera'\ncam.data.lens = 50\n"
                   f"aim = Vector((0, 0, {tz})) - cam.location\n"
                   "cam.rotation_euler = aim.to_track_quat('-Z', 'Y').to_euler()\n"
                   "bpy.context.scene.camera = cam\n")
    sc.objects["Camera"] = {"type": "CAMERA"}
    sc.brief.append(f"A sun light \"Sun\" of strength {sun} at (2, -2, 6), pointing straight down "
                    f"(no rotation).")
    sc.code.append(f"bpy.ops.object.light_add(type='SUN', location=(2, -2, 6))\nsun = active('Sun')\n"
                   f"sun.data.energy = {sun}\n")
    sc.objects["Sun"] = {"type": "LIGHT", "rotation": True}
    if tier == "hard":
        power = rng.choice((200, 300, 500))
        sc.brief.append(f"A point light \"Fill\" of power {power} W at (-3, -2, 3).")
        sc.code.append(f"bpy.ops.object.light_add(type='POINT', location=(-3, -2, 3))\nfill = "
                       f"active('Fill')\n"
                       f"fill.data.energy = {power}\n")
        sc.objects["Fill"] = {"type": "LIGHT"}
    sc.rig = sc.code[start:]


def build_scene(rng: random.Random, tier: str) -> Scene:
    sc, used = Scene(), set[str]()
    length, width, thick = _plate(sc, rng, tier, used)
    left = (round(-length / 4, 3), 0.0, thick)
    if tier == "easy":
        rng.choice((_ball, lambda s, r, a, u: _ring(s, r, a, u, False, False)))(sc, rng, left, used)
    else:
        _ring(sc, rng, left, used, parent=True, texture=tier == "hard")
        _posts(sc, rng, (round(-length / 2 + 0.2, 3), round(-width / 2 + 0.2, 3), thick), used,
               collection=True)
        if tier == "hard":
            _tube(sc, rng, (round(length / 8, 3), round(width / 4, 3), thick), used)
    if tier != "easy":
        sc.brief.append("Put \"Plate\", \"Ring\" and \"Posts\" (only them) in a new collection "
                        "\"Parts\" linked to "
                        "the scene's collection.")
        sc.code.append("parts = bpy.data.collections.new('Parts')\n"
                       "bpy.context.scene.collection.children.link(parts)\n"
                       "for obj in (plate, ring, posts):\n    for c in list(obj.users_collection):\n"
                       "        c.objects.unlink(obj)\n    parts.objects.link(obj)\n")
    _camera_and_lights(sc, rng, tier, max(length, width) / 2)
    return sc


def fixed_cameras(reach: float) -> list[dict[str, Any]]:
    """The verifier's own cameras: a three-quarter view and a top view framing the scene."""
    d, top = round(reach * 2.3 + 0.3, 2), round(reach * 3.2 + 0.3, 2)
    return [{"location": [round(d * 0.8, 2), -d, round(d * 0.7, 2)], "target": [0.0, 0.0, 0.2], "lens": 50.0},
            {"location": [0.0, 0.0, top], "target": [0.0, 0.0, 0.0], "lens": 50.0}]


def impostor(sc: Scene, gold: str) -> str:
    """The right bounding boxes, the wrong shapes: every mesh replaced by a box of its size, all else kept."""
    lines = [HEAD, HELPERS]
    for name, centre, size in sc.boxes:
        lines.append(f"bpy.ops.mesh.primitive_cube_add(size=1, location={tuple(centre)})\n"
                     f"obj = active('{name}')\nobj.scale = {tuple(size)}\n")
        mat = sc.objects[name].get("material")
        if mat:
            lines.append(f"obj.data.materials.append(material('{mat}', (0.5, 0.5, 0.5), 0.5))\n")
    return "".join(lines) + "".join(sc.rig) + SAVE


class BlenderSource(ProceduralSource):
    """Generated Blender scene tasks, rebuilt exactly from (seed, index)."""

    name = "blender"
    config: BlenderConfig

    def build(self, index: int, rng: random.Random) -> Task:
        tier = self.config.tier or TIERS[index % len(TIERS)]
        sc = build_scene(rng, tier)
        script = HEAD + HELPERS + "\n".join(sc.code) + SAVE
        reach = max(max(abs(c) + s / 2 for c, s in zip(centre[:2], size[:2])) for _, centre, size in sc.boxes)
        spec = {"objects": sc.objects, "materials": sc.materials, "camera": "Camera",
                "cameras": fixed_cameras(reach)}
        prompt = "Build this scene in Blender.\n\n" + "\n".join(f"- {b}"
                                                                for b in sc.brief) + f"\n\n{INSTRUCTION}"
        multi = self.config.max_turns > 1
        if multi:
            prompt += ("\n\nTools: `run_scene(script)` writes the script to solution.py, runs it in "
                       "Blender and reports what it built (objects, bounds, parts, holes, materials, "
                       "errors); `render_preview()` renders the saved scene and shows each object's "
                       "silhouette as letters. What is judged is solution.py when you call submit().")
        return Task(id=self.id_at(index), domain="blender", prompt=prompt, answer=script,
                    hidden={"spec.json": json.dumps(spec), "impostor.py": impostor(sc, script)},
                    tier=tier, difficulty=TIERS.index(tier) / 2,
                    limits=TaskLimits(max_turns=self.config.max_turns, max_tokens=3072 if not multi else 2048,
                                      exec_timeout_s=60.0, memory_mb=2048),
                    metadata={"objects": sorted(sc.objects)}, source=f"blender:{self.config.seed}:{index}",
                    seed=self.config.seed, index=index)

    def gold(self, task: Task) -> FinalState:
        return FinalState(answer=fenced(str(task.answer)))

    def negatives(self, task: Task) -> dict[str, FinalState]:
        gold = str(task.answer)
        return {
            **super().negatives(task),
            "empty_script": FinalState(answer=fenced("\n")),
            "never_saves": FinalState(answer=fenced(gold.replace(SAVE, ""))),
            "precomputed_file": FinalState(answer=fenced(
                "with open('scene.blend', 'wb') as f:\n    f.write(b'BLENDER-v500' + bytes(4096))\n"
                "with open('scene.glb', 'wb') as f:\n    f.write(b'glTF' + bytes(64))\n")),
            "imports_reference": FinalState(answer=fenced(
                "import bpy\nbpy.ops.wm.open_mainfile(filepath='/hidden/reference.blend')\nfrom "
                "reference import *\n")),
            "bbox_wrong_shape": FinalState(answer=fenced(task.hidden["impostor.py"])),
        }
