"""The tools of multi-turn `blender` tasks: run the script in Blender and read what it built, render a
preview.

`run_scene` writes the script to `solution.py` in the episode's workspace (what the verifier judges at the
end), runs it and the inspection in a Blender sandbox (the same two commands as the verifier, the same limits)
and answers with the scene report: errors, objects with their type, world bounds, parts, holes, manifoldness,
materials, parent and collections, images and the glTF. `render_preview` renders the saved scene from the
task's fixed cameras and answers with each frame's object silhouettes as text (one letter per object), which a
model that reads text can compare with what it meant to build. Neither tool sees the reference scene.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from rlvr.domains.blender.interpreter import blender_pool
from rlvr.domains.blender.settings import BlenderSettings
from rlvr.domains.blender.verifier import SCRIPT, decode_frames, run_scene
from rlvr.envs.tools import Tool, ToolArgError, ToolContext, ToolOutput, cap
from rlvr.errors import InfraError
from rlvr.sandbox.result import ExecStatus
from rlvr.verify.base import VerifyContext, settings_of

PREVIEW_COLUMNS = 32


def _scene(ctx: ToolContext, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, BlenderSettings]:
    """Run the workspace's script (after writing `args["script"]`, when given); (error text, report,
    settings)."""
    script = args.get("script")
    if script is not None:
        if not isinstance(script, str):
            raise ToolArgError("argument 'script' must be a string")
        ctx.sandbox.write_files({SCRIPT: script})
    files = ctx.sandbox.read_files(None)
    if SCRIPT not in files:
        raise ToolArgError(f"no {SCRIPT} yet: pass the script as `script`")
    s = settings_of(ctx.task, BlenderSettings)
    spec = json.loads(ctx.task.hidden["spec.json"])
    task = ctx.task.model_copy(update={"workspace": {k: v for k, v in files.items() if k != SCRIPT}})
    run, inspected, report = run_scene(blender_pool(VerifyContext()), task, files[SCRIPT], spec, s)
    for res in (run, inspected):
        if res is not None and res.status is ExecStatus.infra_error:
            raise InfraError(res.error or "blender sandbox infra error")
    if not run.ok:
        return f"[{run.status.value}] the script failed:\n{run.stderr[-3000:]}", None, s
    if report is None or not report.get("ok"):
        why = (report or {}).get("why") or (inspected.status.value if inspected else "")
        return f"[error] the saved scene could not be read: {why}", None, s
    return "", report, s


def _fmt(v: list[float]) -> str:
    return "(" + ", ".join(f"{x:.3g}" for x in v) + ")"


def describe(report: dict[str, Any]) -> str:
    """The scene report as text: one line per object, then images, the glTF and the active camera."""
    lines = [f"active camera: {report.get('camera')}"]
    for name, obj in sorted(report.get("objects", {}).items()):
        line = f"- {name} [{obj['type']}] origin {_fmt(obj['location'])}"
        mesh = obj.get("mesh")
        if mesh and "bounds" in mesh:
            lo, hi = mesh["bounds"]
            line += (f", bounds {_fmt(lo)}..{_fmt(hi)}, {mesh['parts']} part(s), holes {mesh['holes']}, "
                     f"{mesh['non_manifold_edges']} non-manifold edges, volume {mesh['volume']:.4g}")
        if obj.get("modifiers"):
            line += f", modifiers {obj['modifiers']}"
        if obj.get("materials"):
            line += f", materials {obj['materials']}"
        if obj.get("parent"):
            line += f", parent {obj['parent']}"
        line += f", collections {obj.get('collections')}"
        if "light" in obj:
            line += f", {obj['light']['type']} light energy {obj['light']['energy']:g}"
        lines.append(line)
    for img in report.get("images", []):
        lines.append(f"- image {img['name']}: {img.get('path') or '(no path)'}, exists {img.get('exists')}, "
                     f"decodes {img.get('decodes')}, inside the workspace {img.get('inside')}")
    glb = report.get("glb", {})
    lines.append(f"scene.glb: {'ok, nodes ' + str(glb.get('nodes')) if glb.get('ok') else glb.get('why')}")
    return "\n".join(lines)


def silhouettes(report: dict[str, Any], s: BlenderSettings) -> str:
    """Each fixed camera's id frame as rows of letters (one per object, `.` for background)."""
    frames = decode_frames(report, s) or []
    names = {v: k for k, v in report.get("ids", {}).items()}
    letters = {i: chr(ord("A") + n % 26) for n, i in enumerate(sorted(names))}
    out = ["legend: " + ", ".join(f"{letters[i]} = {names[i]}" for i in sorted(names))]
    for cam, (_, ids) in enumerate(frames):
        step = max(1, ids.shape[1] // PREVIEW_COLUMNS)
        grid = ids[::step * 2, ::step]  # characters are about twice as tall as wide
        out.append(f"camera {cam}:")
        out += ["".join(letters.get(int(v), "?") if v else "." for v in row) for row in np.asarray(grid)]
    return "\n".join(out)


def run_scene_tool(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    error, report, _ = _scene(ctx, args)
    text = error or "[ok] scene.blend and the report:\n" + describe(report or {})
    return ToolOutput(cap(text, ctx.max_output_chars), exec_status="ok" if report else "exit_nonzero")


def render_preview_tool(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    error, report, s = _scene(ctx, {})
    text = error or silhouettes(report or {}, s)
    return ToolOutput(cap(text, ctx.max_output_chars), exec_status="ok" if report else "exit_nonzero")


TOOLS: tuple[Tool, ...] = (
    Tool("run_scene",
         "Write the bpy script to solution.py (optional `script`), run it in Blender and report the "
                      "scene it saved: objects, bounds, parts, holes, materials, errors.",
         {"type": "object",
          "properties": {"script": {"type": "string", "description": "the whole bpy script"}},
          "required": []}, run_scene_tool),
    Tool("render_preview", "Run solution.py and render the saved scene from the task's two fixed cameras; "
                           "answers with each frame's object silhouettes as letters.",
         {"type": "object", "properties": {}, "required": []}, render_preview_tool, mutates=False),
)
"""The blender domain's own tools, offered to its multi-turn tasks beside the built-in ones."""
