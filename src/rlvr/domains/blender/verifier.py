"""Kind `blender`: run the candidate's bpy script in Blender in the sandbox, inspect the saved scene, render
it.

One lease per verification, two commands, both under Blender's own interpreter (a fixed venv; see
`blender_python`) and the trusted harness `harness/blender/scene.py`, mounted read-only. The Blender pool's
workers import `bpy` once (their warm template), so each command is a fork of an interpreter in which Blender
has started and nothing has run, not a Blender start: the two commands are still two processes, and the
inspection's never ran the candidate's code.

1. `run`: factory settings with an empty scene, scripts in files never auto-run, the candidate's script as
   `__main__`; it must save `scene.blend` and `scene.glb` in the workspace. Limits: the task's
   (Blender-sized).
2. `inspect`, a fresh process: opens `scene.blend` with auto-run off, reports objects, evaluated meshes
   (manifold edges, parts, holes, volume, bounds), materials, images, libraries, cameras and lights, checks
   `scene.glb`, and renders the task's fixed cameras with Cycles on the CPU (a lit frame and an object-id
   frame each). Its one result line carries a nonce the candidate never saw.

The reference scene (the gold script, through the same two commands) is computed once per task and process and
cached. Every number is compared with the reference's, so the prompt's numbers and the checks cannot drift.

Gates (any failing scores 0): a script, a clean run, a scene that opens, a glTF with the objects, every
required object by name and type, the shape of each mesh (parts, holes, manifold where asked, volume within
`volume_tol`), and resources (every image inside the workspace, present and decodable, no outside paths, no
empty packed data, no linked libraries outside). Credited, one check each: per object size, placement,
rotation, parent, collection and material slots; per material colour, roughness and texture; the camera's
placement, aim and being active; per light type, energy and placement; per fixed camera the silhouette IoU of
each object and the colour distance inside its mask. The lit frames are written beside the reference's to
`ctx.extras["frames_dir"]` (a training run's `RunLayout.frames`) or `["preview_dir"]` when set
(`details["frames"]`), which the HTML report shows.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.domains.blender.checks import gate, scene_checks
from rlvr.domains.blender.interpreter import blender_pool
from rlvr.domains.blender.settings import BlenderSettings
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.limits import defaults_of, for_task, resolve
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, settings_of
from rlvr.verify.extract import extract_script
from rlvr.verify.verdict import Verdict

HARNESS = Path(__file__).parent / "harness" / "scene.py"
MOUNT = "/rlvr-blender"
SCRIPT = "solution.py"
REPORT_MARK = "RLVR-BLENDER"
MAX_REPORT_BYTES = 8 << 20


@cache
def harness_text() -> str:
    return HARNESS.read_text()


def render_spec(spec: dict[str, Any], s: BlenderSettings) -> dict[str, Any]:
    """What the harness needs: the fixed cameras and the frame settings."""
    return {"cameras": spec["cameras"],
            "render": {"width": s.width, "height": s.height, "samples": s.samples}}


def parse_report(result: ExecResult, nonce: str) -> dict[str, Any] | None:
    """The inspection's report (the last line marked with this nonce), or None."""
    mark = f"{REPORT_MARK} {nonce} "
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(mark):
            try:
                report = json.loads(line[len(mark):])
            except ValueError:
                return None
            return report if isinstance(report, dict) else None
    return None


def run_scene(pool: SandboxPool, task: Task, script: str, spec: dict[str, Any], s: BlenderSettings,
              ) -> tuple[ExecResult, ExecResult | None, dict[str, Any] | None]:
    """(run result, inspect result or None when the run failed, report or None)."""
    files = {**task.workspace, SCRIPT: script}
    mounts = {MOUNT: {"scene.py": harness_text(), "spec.json": json.dumps(render_spec(spec, s))}}
    inspect_limits = resolve(defaults_of(pool), task=ExecLimits(
        timeout_s=s.inspect_timeout_s, memory_mb=s.inspect_memory_mb, output_bytes=MAX_REPORT_BYTES))
    nonce = secrets.token_hex(12)
    with pool.lease(files, mounts=mounts) as sandbox:
        run = sandbox.run(["python", f"{MOUNT}/scene.py", "run", SCRIPT], limits=for_task(pool, task))
        if not run.ok:
            return run, None, None
        inspected = sandbox.run(["python", f"{MOUNT}/scene.py", "inspect", f"{MOUNT}/spec.json", nonce],
                                limits=inspect_limits)
    return run, inspected, parse_report(inspected, nonce) if inspected.ok else None


_REFERENCES: dict[str, dict[str, Any]] = {}
_REF_LOCK = threading.Lock()


def _ref_key(task: Task, spec: dict[str, Any], s: BlenderSettings) -> str:
    blob = json.dumps([task.key, str(task.answer), render_spec(spec, s), harness_text()], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def reference(pool: SandboxPool, task: Task, spec: dict[str, Any], s: BlenderSettings) -> dict[str,
                                                                                               Any] | str:
    """The reference scene's report (cached per task, settings and harness), or why it could not be built."""
    key = _ref_key(task, spec, s)
    with _REF_LOCK:
        if key in _REFERENCES:
            return _REFERENCES[key]
    run, inspected, report = run_scene(pool, task, str(task.answer), spec, s)
    if report is None or not report.get("ok"):
        why = (report or {}).get("why") or (run.stderr[-300:] if not run.ok else
                                            (inspected.stderr[-300:] if inspected else ""))
        return f"the reference scene of {task.key} failed ({run.status.value}): {why}"
    with _REF_LOCK:
        if len(_REFERENCES) > 256:
            _REFERENCES.pop(next(iter(_REFERENCES)))
        _REFERENCES[key] = report
    return report


def decode_frames(report: dict[str, Any], s: BlenderSettings) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """(rgb HxWx3 uint8, ids HxW uint8) per fixed camera, or None when the report's frames are malformed."""
    out = []
    try:
        for frame in report.get("frames", []):
            rgb = np.frombuffer(base64.b64decode(frame["rgb"], validate=True), dtype=np.uint8)
            ids = np.frombuffer(base64.b64decode(frame["ids"], validate=True), dtype=np.uint8)
            if rgb.size != s.width * s.height * 3 or ids.size != s.width * s.height:
                return None
            out.append((rgb.reshape(s.height, s.width, 3), ids.reshape(s.height, s.width)))
    except (KeyError, TypeError, binascii.Error):
        return None
    return out


def _previews(task: Task, script: str, report: dict[str, Any], ref: dict[str, Any], preview_dir: str,
              ) -> list[dict[str, Any]]:
    """Write the candidate's and the reference's lit frames as PNGs; (camera, candidate, reference) paths."""
    root = Path(preview_dir)
    root.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha256(script.encode()).hexdigest()[:12]
    frames = []
    for i, (mine, theirs) in enumerate(zip(report.get("frames", []), ref.get("frames", []))):
        paths = {}
        for who, frame, name in (("candidate", mine, tag), ("reference", theirs, "reference")):
            path = root / f"{task.domain}-{task.id}-{name}-cam{i}.png"
            try:
                path.write_bytes(base64.b64decode(frame["png"], validate=True))
            except (KeyError, TypeError, binascii.Error):
                continue
            paths[who] = str(path)
        frames.append({"camera": i, **paths})
    return frames


class BlenderVerifier:
    """Sandboxed Blender script, sandboxed inspection and renders, comparison with the reference scene."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        s = settings_of(task, BlenderSettings)
        try:
            spec = json.loads(task.hidden["spec.json"])
        except (KeyError, json.JSONDecodeError) as exc:
            return Verdict.infra(f"blender task {task.key} has no valid hidden/spec.json: {exc!s:.200}")
        script, why = extract_script(final.answer)
        if script is None and final.files.get(SCRIPT):
            script = final.files[SCRIPT]  # a multi-turn episode leaves its script in the workspace
        if script is None:
            return Verdict(score=0.0, checks=[gate("script", False, why)])
        pool = blender_pool(self.ctx)
        ref = reference(pool, task, spec, s)
        if isinstance(ref, str):
            return Verdict.infra(ref)
        run, inspected, report = run_scene(pool, task, script, spec, s)
        for res in (run, inspected):
            if res is not None and res.status is ExecStatus.infra_error:
                return Verdict.infra(f"sandbox failure: {res.error}")
        timings = {"run": run.wall_s, "inspect": inspected.wall_s if inspected else 0.0}
        checks = [gate("script", True, f"{len(script)} characters"),
                  gate("runs", run.ok, "exit 0" if run.ok else f"{run.status.value}: {run.stderr[-300:]}")]
        if inspected is None:
            return Verdict(score=0.0, checks=checks, timings=timings, details={"stderr": run.stderr[-2000:]})
        if report is None:
            why = f"{inspected.status.value}: {inspected.stderr[-200:]}" if not inspected.ok else "no report"
            return Verdict(score=0.0,
                           checks=checks + [gate("saved", False, f"the scene could not be inspected: "
                                                                         f"{why}")], timings=timings)
        checks.append(gate("saved", bool(report.get("ok")), report.get("why") or "scene.blend opens"))
        if not report.get("ok"):
            return Verdict(score=0.0, checks=checks, timings=timings)
        inner = report.get("timings")
        if isinstance(inner, dict):
            timings.update({f"inspect_{k}": float(v) for k, v in inner.items() if k in ("measure", "render")})
        t0 = time.perf_counter()
        frames, ref_frames = decode_frames(report, s), decode_frames(ref, s)
        if ref_frames is None:
            return Verdict.infra(f"the reference inspection of {task.key} returned malformed frames")
        # the candidate's scene is to blame, not the sandbox
        if frames is None or len(frames) != len(ref_frames):
            return Verdict(score=0.0,
                           checks=checks + [gate("rendered", False, "the frames of the fixed cameras "
                                                                             "came out malformed")],
                                                                             timings=timings)
        gates, credited = scene_checks(spec, report, ref, frames, ref_frames, s)
        timings["compare"] = time.perf_counter() - t0
        checks += gates
        details: dict[str, Any] = {"objects": sorted(report.get("objects", {}))[:50]}
        preview_dir = self.ctx.extras.get("frames_dir") or self.ctx.extras.get("preview_dir")
        if preview_dir:
            details["frames"] = _previews(task, script, report, ref, str(preview_dir))
            if details["frames"] and "candidate" in details["frames"][0]:
                details["preview"] = details["frames"][0]["candidate"]
        if not all(g.passed for g in checks):
            return Verdict(score=0.0, passed=False, checks=checks + credited, details=details,
                           timings=timings)
        return Verdict.from_checks(checks + credited, details=details, timings=timings)
