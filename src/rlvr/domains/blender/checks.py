"""The checks of the `blender` verifier: a candidate's scene report and frames against the reference's.

Pure functions over the inspection's JSON reports and decoded frames (numpy arrays), so they are tested
without Blender. `scene_checks` returns (gates, credited checks); `rlvr.domains.blender.verifier` says what
each one means.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlvr.domains.blender.settings import BlenderSettings
from rlvr.verify.verdict import Check

Frames = list[tuple[np.ndarray, np.ndarray]]
RENDERABLE = ("MESH", "CURVE", "SURFACE", "META", "FONT")


def gate(name: str, ok: bool, detail: str) -> Check:
    """A gate: weight 0, and the verdict scores 0 unless it passed."""
    return Check(name=f"gate:{name}", score=float(ok), weight=0.0, passed=ok, detail=detail[:300])


def _check(name: str, ok: bool, detail: str, score: float | None = None) -> Check:
    return Check(name=name, score=float(ok) if score is None else max(0.0, min(1.0, score)), passed=ok,
                 detail=detail[:300])


def _close(a: list[float], b: list[float], tol: float) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def _angle_deg(r1: list[list[float]], r2: list[list[float]]) -> float:
    """The angle of the rotation taking one 3x3 rotation matrix to the other."""
    m = np.asarray(r1, dtype=float).T @ np.asarray(r2, dtype=float)
    return math.degrees(math.acos(max(-1.0, min(1.0, (float(np.trace(m)) - 1.0) / 2.0))))


def _fmt(v: list[float]) -> str:
    return "(" + ", ".join(f"{x:.3g}" for x in v) + ")"


def shape_gate(name: str, mine: dict[str, Any], ref: dict[str, Any], manifold: bool, volume_tol: float
               ) -> tuple[bool, str]:
    """Whether a mesh has the reference's topology and volume (parts, holes, manifold where asked)."""
    if "too_big" in mine:
        return False, f"{name}: {mine['too_big']} evaluated vertices"
    if manifold and mine.get("non_manifold_edges", 1):
        return False, f"{name}: {mine.get('non_manifold_edges')} non-manifold edges, want a closed surface"
    if mine.get("parts") != ref.get("parts"):
        return False, f"{name}: {mine.get('parts')} separate parts, want {ref.get('parts')}"
    if ref.get("holes") is not None and mine.get("holes") != ref.get("holes"):
        return False, f"{name}: {mine.get('holes')} holes, want {ref.get('holes')}"
    want, got = float(ref.get("volume") or 0.0), float(mine.get("volume") or 0.0)
    if want > 0 and abs(got - want) > volume_tol * want:
        return False, f"{name}: volume {got:.4g}, want {want:.4g} (±{volume_tol:.0%})"
    return True, f"{name}: {mine.get('parts')} part(s), {mine.get('holes')} hole(s), volume {got:.4g}"


def resource_gate(report: dict[str, Any]) -> tuple[bool, str]:
    """Every image inside the workspace, present and decodable (or packed with data); no outside libraries."""
    for img in report.get("images", []):
        label = f"image {img.get('name')!r}"
        if img.get("path") and not img.get("inside"):
            return False, f"{label} points outside the workspace: {img.get('path')}"
        if img.get("packed_bytes") == 0:
            return False, f"{label} is packed but empty"
        if not img.get("exists") and not img.get("packed_bytes"):
            return False, f"{label} is missing: {img.get('filepath') or '(no path)'}"
        if not img.get("decodes"):
            return False, f"{label} does not decode"
    for lib in report.get("libraries", []):
        if not lib.get("inside"):
            return False, f"linked library outside the workspace: {lib.get('path')}"
    return True, f"{len(report.get('images', []))} image(s), {len(report.get('libraries', []))} library(ies)"


def _object_checks(name: str, want: dict[str, Any], mine: dict[str, Any], ref: dict[str, Any],
                   s: BlenderSettings) -> list[Check]:
    out: list[Check] = []
    if "mesh" in ref and "mesh" in mine and "bounds" in mine["mesh"]:
        (rlo, rhi), (mlo, mhi) = ref["mesh"]["bounds"], mine["mesh"]["bounds"]
        rsize, msize = [h - lo for lo, h in zip(rlo, rhi)], [h - lo for lo, h in zip(mlo, mhi)]
        tol = s.size_tol + 0.02 * max(rsize)
        out.append(_check(f"{name}:size", _close(msize, rsize, tol), f"{_fmt(msize)}, want {_fmt(rsize)}"))
        rc, mc = [(a + b) / 2 for a, b in zip(rlo, rhi)], [(a + b) / 2 for a, b in zip(mlo, mhi)]
        out.append(_check(f"{name}:placement", _close(mc, rc, tol), f"centre {_fmt(mc)}, want {_fmt(rc)}"))
        same_box = _close(msize, rsize, tol) and _close(mc, rc, tol)
    else:
        tol = s.size_tol
        out.append(_check(f"{name}:placement", _close(mine["location"], ref["location"], tol),
                          f"at {_fmt(mine['location'])}, want {_fmt(ref['location'])}"))
        same_box = False
    if want.get("rotation"):
        angle = _angle_deg(mine["rotation"], ref["rotation"])
        ok = angle <= s.angle_tol_deg or (same_box and want.get("type") == "MESH")
        out.append(_check(f"{name}:rotation", ok, f"{angle:.1f} degrees from the asked rotation"))
    if "parent" in want:
        out.append(_check(f"{name}:parent", mine.get("parent") == want["parent"],
                          f"parent {mine.get('parent')!r}, want {want['parent']!r}"))
    if want.get("collection"):
        out.append(_check(f"{name}:collection", want["collection"] in mine.get("collections", []),
                          f"in {mine.get('collections')}, want {want['collection']!r}"))
    if want.get("material"):
        slots = mine.get("materials", [])
        ok = bool(slots) and None not in slots and want["material"] in slots
        out.append(_check(f"{name}:material", ok,
                          f"slots {slots}, want {want['material']!r} in filled slots"))
    if "light" in ref:
        got, ref_light = mine.get("light", {}), ref["light"]
        out.append(_check(f"{name}:light_type", got.get("type") == ref_light["type"],
                          f"{got.get('type')}, want {ref_light['type']}"))
        energy = float(got.get("energy", 0.0))
        out.append(_check(f"{name}:energy", abs(energy - ref_light["energy"]) <= 0.05 * ref_light["energy"],
                          f"{energy:g}, want {ref_light['energy']:g}"))
    if "camera" in ref:
        fwd, rfwd = mine.get("camera", {}).get("forward", [0, 0, 0]), ref["camera"]["forward"]
        cos = sum(a * b for a, b in zip(fwd, rfwd))
        angle = math.degrees(math.acos(max(-1.0, min(1.0, cos))))
        out.append(_check(f"{name}:aim", angle <= max(3.0, s.angle_tol_deg),
                          f"{angle:.1f} degrees off the aim"))
    return out


def _material_checks(name: str, want: dict[str, Any], report: dict[str, Any], ref: dict[str, Any],
                     s: BlenderSettings) -> list[Check]:
    mine, theirs = report.get("materials", {}).get(name), ref["materials"][name]
    if mine is None:
        return [_check(f"material:{name}", False, "no such material")]
    out = []
    if want.get("texture"):
        images = {i["name"]: i for i in report.get("images", [])}
        used = [images[n] for n in mine.get("images", []) if n in images]
        path = "/workspace/" + want["texture"]
        ok = any(i.get("path") == path and i.get("decodes") for i in used) and bool(mine.get("base_linked"))
        out.append(_check(f"material:{name}:texture", ok,
                          f"images {[i.get('path') for i in used]}, want {path} feeding the base colour"))
    else:
        got, ref_c = mine.get("base_color") or [9, 9, 9], theirs["base_color"]
        out.append(_check(f"material:{name}:colour", _close(got, ref_c, 0.02),
                          f"{_fmt(got)}, want {_fmt(ref_c)}"))
    rough = mine.get("roughness")
    out.append(_check(f"material:{name}:roughness",
                      rough is not None and abs(rough - theirs["roughness"]) <= 0.02,
                      f"{rough}, want {theirs['roughness']:g}"))
    return out


def render_checks(names: list[str], report: dict[str, Any], ref: dict[str, Any], frames: Frames,
                  ref_frames: Frames, s: BlenderSettings) -> list[Check]:
    """Per fixed camera and object: silhouette IoU against the reference, and mean colour inside the mask."""
    out: list[Check] = []
    mine_ids, ref_ids = report.get("ids", {}), ref.get("ids", {})
    for cam, ((rgb, ids), (rrgb, rids)) in enumerate(zip(frames, ref_frames)):
        for name in names:
            want = rids == ref_ids.get(name, -1)
            if not want.any():
                continue  # not visible from this camera in the reference
            got = ids == mine_ids.get(name, -1)
            iou = float((got & want).sum()) / float((got | want).sum())
            out.append(_check(f"render{cam}:{name}:silhouette", iou >= s.iou_min, f"IoU {iou:.3f}",
                              score=(iou - 0.5) / (s.iou_min - 0.5)))
            both = got & want
            if not both.any():
                out.append(_check(f"render{cam}:{name}:colour", False,
                                  "no overlap with the reference's mask"))
                continue
            dist = float(np.abs(rgb[both].mean(axis=0) - rrgb[both].mean(axis=0)).max()) / 255.0
            out.append(_check(f"render{cam}:{name}:colour", dist <= s.colour_tol,
                              f"mean colour off by {dist:.3f}",
                              score=1.0 - dist / (2 * s.colour_tol)))
    return out


def scene_checks(spec: dict[str, Any], report: dict[str, Any], ref: dict[str, Any], frames: Frames,
                 ref_frames: Frames, s: BlenderSettings) -> tuple[list[Check], list[Check]]:
    """(gates, credited checks) of a candidate's scene report against the reference's."""
    objects, ref_objects, wanted = report.get("objects", {}), ref["objects"], spec["objects"]
    glb = report.get("glb", {})
    meshes = [n for n, w in wanted.items() if w["type"] == "MESH"]
    missing_glb = [n for n in meshes if n not in glb.get("nodes", [])]
    gates = [gate("glb", bool(glb.get("ok")) and not missing_glb,
                   glb.get("why")
                   or (f"scene.glb lacks {missing_glb}" if missing_glb else "scene.glb has the objects"))]
    absent = [n for n, w in wanted.items() if objects.get(n, {}).get("type") != w["type"]]
    gates.append(gate("objects", not absent, f"missing or of the wrong type: {absent}" if absent
                       else f"{len(wanted)} objects by name"))
    gates.append(gate("resources", *resource_gate(report)))
    if absent:
        return gates, []
    shapes = [shape_gate(n, objects[n].get("mesh", {}), ref_objects[n]["mesh"],
                         bool(wanted[n].get("manifold")),
                         s.volume_tol) for n in meshes]
    bad = [why for ok, why in shapes if not ok]
    gates.append(gate("shape", not bad, "; ".join(bad) if bad else "; ".join(why for _, why in shapes)))
    credited: list[Check] = []
    for name, want in wanted.items():
        credited += _object_checks(name, want, objects[name], ref_objects[name], s)
    for name, want in spec.get("materials", {}).items():
        credited += _material_checks(name, want, report, ref, s)
    if spec.get("camera"):
        credited.append(_check("camera:active", report.get("camera") == spec["camera"],
                               f"active camera {report.get('camera')!r}, want {spec['camera']!r}"))
    credited += render_checks(meshes, report, ref, frames, ref_frames, s)
    return gates, credited
