"""The trusted Blender harness of the `blender` verifier; it runs inside the sandbox under Blender's
interpreter.

Not an rlvr module: the verifier mounts this file read-only and runs it as a script in the Blender pool's warm
interpreter (a fork with `bpy` already imported; the standard library, `bpy` and numpy only; the workspace is
not on sys.path, so nothing in it can shadow them). Two modes:

    scene.py run SCRIPT                  the candidate's step: Blender's factory settings with an empty scene,
                                         add-ons' and the file's own scripts never auto-run, then SCRIPT as
                                         __main__ (it must save scene.blend and scene.glb itself)
    scene.py inspect SPEC.json NONCE     the verifier's step, a fresh process: open scene.blend with scripts
                                         off, report objects, meshes, materials, images, libraries, cameras
                                         and lights, check scene.glb, render the task's fixed cameras (Cycles
                                         on the CPU: a lit frame and an object-id frame) and print one line,
                                         `RLVR-BLENDER <NONCE> <json>`

`inspect` reads the candidate's files with Blender inside the sandbox's limits; the verifier only parses its
one JSON line. Frames travel as base64 raw bytes (RGB and id planes) and as PNG previews.
"""
from __future__ import annotations

import base64
import json
import os
import runpy
import struct
import sys
import time
import traceback

WORKSPACE = "/workspace"
MAX_EVAL_VERTS = 2_000_000
"""Meshes with more evaluated vertices are reported without topology (the time limit still applies)."""


def _factory() -> None:
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.context.preferences.filepaths.use_scripts_auto_execute = False


def run(script: str) -> int:
    _factory()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001  (the candidate's error goes to stderr, the status says it failed)
        traceback.print_exc()
        return 1
    return 0


# ------------------------------------------------------------------------------------------------ inspect
def _inside(path: str) -> bool:
    real = os.path.realpath(path)
    return real == WORKSPACE or real.startswith(WORKSPACE + "/")


def _vec(v) -> list[float]:
    return [round(float(x), 5) for x in v]


def _topology(obj, depsgraph) -> dict:
    import bmesh

    ev = obj.evaluated_get(depsgraph)
    mesh = ev.to_mesh()
    try:
        if len(mesh.vertices) > MAX_EVAL_VERTS:
            return {"too_big": len(mesh.vertices)}
        bm = bmesh.new()
        try:
            bm.from_mesh(mesh)
            bm.transform(obj.matrix_world)
            verts, edges, faces = len(bm.verts), len(bm.edges), len(bm.faces)
            non_manifold = sum(1 for e in bm.edges if len(e.link_faces) != 2)
            parts, seen = 0, set()
            for v in bm.verts:
                if v.index in seen:
                    continue
                parts += 1
                stack = [v]
                seen.add(v.index)
                while stack:
                    cur = stack.pop()
                    for e in cur.link_edges:
                        o = e.other_vert(cur)
                        if o.index not in seen:
                            seen.add(o.index)
                            stack.append(o)
            euler = verts - edges + faces
            closed = non_manifold == 0 and faces > 0
            volume = abs(bm.calc_volume(signed=True)) if closed else 0.0
            lo = [min(v.co[i] for v in bm.verts) for i in range(3)] if verts else [0, 0, 0]
            hi = [max(v.co[i] for v in bm.verts) for i in range(3)] if verts else [0, 0, 0]
        finally:
            bm.free()
    finally:
        ev.to_mesh_clear()
    return {"verts": verts, "faces": faces, "non_manifold_edges": non_manifold, "parts": parts,
            "euler": euler,
            "holes": (2 * parts - euler) // 2 if closed else None, "volume": round(volume, 6),
            "bounds": [_vec(lo), _vec(hi)]}


def _material(mat) -> dict:
    out = {"name": mat.name, "base_color": None, "roughness": None, "metallic": None, "images": []}
    tree = mat.node_tree
    if tree is None:
        return out
    for node in tree.nodes:
        if node.type == "BSDF_PRINCIPLED" and out["base_color"] is None:
            out["base_color"] = _vec(node.inputs["Base Color"].default_value[:3])
            out["roughness"] = round(float(node.inputs["Roughness"].default_value), 5)
            out["metallic"] = round(float(node.inputs["Metallic"].default_value), 5)
            out["base_linked"] = node.inputs["Base Color"].is_linked
        if node.type == "TEX_IMAGE" and node.image is not None:
            out["images"].append(node.image.name)
    return out


def _image(img) -> dict:
    import bpy

    raw = img.filepath
    path = bpy.path.abspath(raw) if raw else ""
    packed = img.packed_file
    info = {"name": img.name, "source": img.source, "filepath": raw,
            "path": os.path.normpath(path) if path else "",
            "packed_bytes": packed.size if packed is not None else None,
            "inside": bool(path) and _inside(path),
            "exists": bool(path) and os.path.isfile(path), "decodes": False, "size": [0, 0]}
    if img.source == "FILE" and (info["exists"] or packed is not None) and (info["inside"]
                                                                            or packed is not None):
        try:
            img.reload()
            info["size"] = [int(img.size[0]), int(img.size[1])]
            info["decodes"] = img.size[0] > 0 and img.size[1] > 0 and len(img.pixels) > 0
        except Exception as exc:  # noqa: BLE001  (an unreadable image is the candidate's fault)
            info["error"] = f"{type(exc).__name__}: {exc}"[:200]
    return info


def _glb(path: str) -> dict:
    if not os.path.isfile(path) or os.path.islink(path):
        return {"ok": False, "why": "scene.glb was not written"}
    with open(path, "rb") as f:
        head = f.read(20)
        if len(head) < 20:
            return {"ok": False, "why": "scene.glb is too short"}
        magic, version, _total, chunk_len, chunk_type = struct.unpack("<4sIIII", head)
        if magic != b"glTF" or version != 2 or chunk_type != 0x4E4F534A or chunk_len > 64 << 20:
            return {"ok": False, "why": "scene.glb is not binary glTF 2.0"}
        try:
            doc = json.loads(f.read(chunk_len))
        except ValueError:
            return {"ok": False, "why": "scene.glb has no readable JSON chunk"}
    if not isinstance(doc, dict):
        return {"ok": False, "why": "scene.glb has no readable JSON chunk"}
    nodes = [n.get("name", "") for n in doc.get("nodes", []) if isinstance(n, dict)]
    return {"ok": True, "nodes": nodes[:500], "meshes": len(doc.get("meshes", []) or [])}


def _look(cam, location, target) -> None:
    from mathutils import Vector

    cam.location = Vector(location)
    direction = Vector(target) - Vector(location)
    cam.rotation_euler = direction.to_track_quat("-Z", "Y").to_euler()


def _frames(bpy, scene, spec: dict) -> list[dict]:
    """Render the task's fixed cameras: a lit frame and an object-id frame each (base64 raw planes)."""
    import numpy as np

    render = spec["render"]
    ids = {}
    for k, obj in enumerate(sorted((o for o in scene.objects if o.type in ("MESH", "CURVE", "SURFACE", "META",
                                                                          "FONT")), key=lambda o: o.name)):
        if k >= 250:
            break
        ids[obj.name] = k + 1
        obj.color = (ids[obj.name] / 255.0, 0.0, 0.0, 1.0)
    world = bpy.data.worlds.new("_rlvr_world")
    world.color = (0.05, 0.05, 0.05)
    scene.world = world
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.use_denoising = False
    scene.cycles.seed = 0
    scene.render.threads_mode = "FIXED"
    scene.render.threads = 1
    scene.render.resolution_x, scene.render.resolution_y = render["width"], render["height"]
    scene.render.resolution_percentage = 100
    scene.render.use_border = False  # a crop or border of the candidate's must not shrink the frames
    scene.render.use_crop_to_border = False
    scene.render.film_transparent = True
    scene.render.use_compositing = False
    scene.render.use_sequencer = False
    scene.render.dither_intensity = 0.0
    scene.render.image_settings.file_format = "PNG"
    scene.render.image_settings.color_mode = "RGBA"
    scene.render.image_settings.color_depth = "8"
    scene.frame_set(1)
    layer = scene.view_layers[0]
    for other in scene.view_layers:  # one layer renders, the one that gets the id override
        other.use = other == layer
    layer.samples = 0  # a layer's own sample count would override the scene's
    scene.render.use_freestyle = False

    ident = bpy.data.materials.new("_rlvr_ids")
    nodes, links = ident.node_tree.nodes, ident.node_tree.links
    nodes.clear()
    info, emit, out = nodes.new("ShaderNodeObjectInfo"), nodes.new("ShaderNodeEmission"), nodes.new(
        "ShaderNodeOutputMaterial")
    links.new(info.outputs["Color"], emit.inputs["Color"])
    links.new(emit.outputs["Emission"], out.inputs["Surface"])

    frames = []
    for i, cam_spec in enumerate(spec["cameras"]):
        data = bpy.data.cameras.new(f"_rlvr_cam{i}")
        data.lens = cam_spec.get("lens", 50.0)
        cam = bpy.data.objects.new(f"_rlvr_cam{i}", data)
        scene.collection.objects.link(cam)
        _look(cam, cam_spec["location"], cam_spec["target"])
        scene.camera = cam
        planes = {}
        for kind in ("rgb", "ids"):
            lit = kind == "rgb"
            layer.material_override = None if lit else ident
            scene.view_settings.view_transform = "Standard" if lit else "Raw"
            scene.view_settings.look = "None"
            scene.view_settings.exposure, scene.view_settings.gamma = 0.0, 1.0
            scene.cycles.samples = render["samples"] if lit else 1
            scene.cycles.max_bounces = 4 if lit else 0
            scene.cycles.filter_width = 1.5 if lit else 0.01
            path = f"/tmp/_rlvr_{kind}{i}.png"
            scene.render.filepath = path
            bpy.ops.render.render(write_still=True)
            img = bpy.data.images.load(path)
            px = np.empty(img.size[0] * img.size[1] * 4, dtype=np.float32)
            img.pixels.foreach_get(px)
            px = np.flipud(px.reshape(img.size[1], img.size[0], 4))
            bpy.data.images.remove(img)
            if lit:
                rgba = np.clip(px * 255.0 + 0.5, 0, 255).astype(np.uint8)
                planes["rgb"] = base64.b64encode(rgba[..., :3].tobytes()).decode()
                with open(path, "rb") as f:
                    planes["png"] = base64.b64encode(f.read()).decode()
            else:
                idx = np.where(px[..., 3] > 0.5, np.clip(px[..., 0] * 255.0 + 0.5, 0, 255),
                               0).astype(np.uint8)
                planes["ids"] = base64.b64encode(idx.tobytes()).decode()
        frames.append(planes)
    layer.material_override = None
    return frames, ids


def inspect(spec_path: str, nonce: str) -> int:
    import bpy

    with open(spec_path) as f:
        spec = json.load(f)
    report: dict = {"ok": False}
    blend = os.path.join(WORKSPACE, "scene.blend")
    try:
        _factory()
        if not os.path.isfile(blend) or os.path.islink(blend):
            report["why"] = "scene.blend was not saved"
        else:
            try:
                bpy.ops.wm.open_mainfile(filepath=blend, load_ui=False)
            except Exception as exc:  # noqa: BLE001
                report["why"] = f"scene.blend does not open: {exc}"[:300]
            else:
                report.update(_scene_report(bpy, spec))
                report["ok"] = True
        report["glb"] = _glb(os.path.join(WORKSPACE, "scene.glb"))
    except Exception:  # noqa: BLE001  (a scene that breaks the inspector is reported, the verifier decides)
        report = {"ok": False, "why": "inspecting the scene failed: " + traceback.format_exc()[-400:]}
    sys.stdout.write(f"\nRLVR-BLENDER {nonce} {json.dumps(report)}\n")
    sys.stdout.flush()
    return 0


def _scene_report(bpy, spec: dict) -> dict:
    started = time.perf_counter()
    scene = bpy.context.scene
    depsgraph = bpy.context.evaluated_depsgraph_get()
    objects = {}
    for obj in scene.objects:
        entry = {"type": obj.type, "parent": obj.parent.name if obj.parent else None,
                 "collections": sorted(c.name for c in obj.users_collection),
                 "location": _vec(obj.matrix_world.translation),
                 "rotation": [_vec(r) for r in obj.matrix_world.to_3x3().normalized()],
                 "dimensions": _vec(obj.dimensions), "modifiers": [m.type for m in obj.modifiers],
                 "materials": [s.material.name if s.material else None for s in obj.material_slots],
                 "hide_render": obj.hide_render}
        if obj.type == "MESH":
            entry["mesh"] = _topology(obj, depsgraph)
        elif obj.type == "LIGHT":
            entry["light"] = {"type": obj.data.type, "energy": round(float(obj.data.energy), 4),
                              "color": _vec(obj.data.color)}
        elif obj.type == "CAMERA":
            fwd = obj.matrix_world.to_3x3() @ __import__("mathutils").Vector((0.0, 0.0, -1.0))
            entry["camera"] = {"lens": round(float(obj.data.lens), 4), "forward": _vec(fwd.normalized())}
        objects[obj.name] = entry
    report = {
        "objects": objects,
        "camera": scene.camera.name if scene.camera else None,
        "collections": {c.name: sorted(o.name for o in c.all_objects) for c in bpy.data.collections},
        "materials": {m.name: _material(m) for m in bpy.data.materials},
        "images": [_image(i) for i in bpy.data.images if i.source in ("FILE", "SEQUENCE", "MOVIE")],
        "libraries": [{"path": bpy.path.abspath(lib.filepath),
                       "inside": _inside(bpy.path.abspath(lib.filepath))}
                      for lib in bpy.data.libraries],
    }
    measured = time.perf_counter()
    report["frames"], report["ids"] = _frames(bpy, scene, spec)
    report["timings"] = {"measure": measured - started, "render": time.perf_counter() - measured}
    return report


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        return run(argv[1])
    if len(argv) == 3 and argv[0] == "inspect":
        return inspect(argv[1], argv[2])
    print("usage: scene.py run SCRIPT | inspect SPEC.json NONCE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
