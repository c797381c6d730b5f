"""The blender verifier's logic without Blender: reports and frames answered by a fake sandbox.

What the inspection reports is faked here; `test_blender.py` (marker `blender`) runs the real thing.
"""
from __future__ import annotations

import base64
import copy
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rlvr.domains.blender import interpreter as blender_env
from rlvr.domains.blender import verifier as blender
from rlvr.domains.blender.checks import render_checks, resource_gate, shape_gate
from rlvr.domains.blender.interpreter import WARM
from rlvr.domains.blender.settings import BlenderSettings
from rlvr.domains.blender.source import fenced
from rlvr.errors import UserError
from rlvr.sandbox.fake import FakeCall, FakePool
from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.verdict import Verdict

W = H = 8
SPEC = {"objects": {"Box": {"type": "MESH", "manifold": True, "material": "M", "collection": "Parts",
                            "parent": None},
                    "Camera": {"type": "CAMERA"}},
        "materials": {"M": {}}, "camera": "Camera",
        "cameras": [{"location": [3, -3, 2], "target": [0, 0, 0]}]}


def _frame(ids: np.ndarray, colour: tuple[int, int, int]) -> dict[str, str]:
    rgb = np.zeros((H, W, 3), dtype=np.uint8)
    rgb[ids > 0] = colour
    return {"rgb": base64.b64encode(rgb.tobytes()).decode(), "ids": base64.b64encode(ids.tobytes()).decode(),
            "png": base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()}


def _report(mask: np.ndarray | None = None, colour: tuple[int, int, int] = (200, 20, 20), **box: Any
            ) -> dict[str, Any]:
    ids = np.zeros((H, W), dtype=np.uint8)
    if mask is None:
        ids[2:6, 2:6] = 1
    else:
        ids[mask] = 1
    mesh = {"verts": 8, "faces": 6, "non_manifold_edges": 0, "parts": 1, "euler": 2, "holes": 0,
            "volume": 1.0,
            "bounds": [[-0.5, -0.5, 0.0], [0.5, 0.5, 1.0]], **box}
    eye = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    return {"ok": True, "camera": "Camera",
            "objects": {"Box": {"type": "MESH", "parent": None, "collections": ["Parts"],
                                "location": [0, 0, 0.5],
                                "rotation": eye, "dimensions": [1, 1, 1], "modifiers": [], "materials": ["M"],
                                "mesh": mesh},
                        "Camera": {"type": "CAMERA", "parent": None, "collections": ["Scene Collection"],
                                   "location": [3, -3, 2], "rotation": eye, "dimensions": [0, 0, 0],
                                   "materials": [], "camera": {"lens": 50, "forward": [-0.64, 0.64, -0.43]}}},
            "collections": {"Parts": ["Box"]},
            "materials": {"M": {"name": "M", "base_color": [0.8, 0.1, 0.1], "roughness": 0.5, "metallic": 0.0,
                                "images": [], "base_linked": False}},
            "images": [], "libraries": [], "ids": {"Box": 1}, "frames": [_frame(ids, colour)],
            "glb": {"ok": True, "nodes": ["Box"], "meshes": 1}}


def _task(**verifier: Any) -> Task:
    return Task(id="t", domain="blender", prompt="p", answer="GOLD", hidden={"spec.json": json.dumps(SPEC)},
                verifier={"width": W, "height": H, **verifier})


def _pool(candidate: dict[str, Any] | None, reference: dict[str, Any] | None = None,
          run_status: ExecStatus = ExecStatus.ok, forge: bool = False) -> FakePool:
    def handler(call: FakeCall) -> ExecResult | str:
        gold = call.files["solution.py"] == b"GOLD"
        if call.argv[2] == "run":
            return ExecResult(status=ExecStatus.ok if gold else run_status, exit_code=0, error="worker died")
        report = reference or _report() if gold else candidate
        nonce = "not-the-nonce" if forge and not gold else call.argv[-1]
        return f"noise\nRLVR-BLENDER {nonce} {json.dumps(report)}\n"
    return FakePool(handler)


def _verify(pool: FakePool, script: str = "import bpy", **verifier: Any) -> Verdict:
    return verify(_task(**verifier), FinalState(answer=fenced(script + "\n")),
                  VerifyContext(extras={"blender_pool": pool}))


def test_the_reference_scene_itself_scores_one() -> None:
    verdict = _verify(_pool(_report()))
    assert verdict.passed and verdict.score == 1.0, [c for c in verdict.checks if not c.passed]


def test_commands_run_the_mounted_harness_in_the_warm_interpreter() -> None:
    pool = _pool(_report())
    _verify(pool)
    run, inspect = pool.calls[-2:]
    assert run.argv[:3] == ["python", "/rlvr-blender/scene.py", "run"]
    assert inspect.argv[:3] == ["python", "/rlvr-blender/scene.py", "inspect"]
    warm = SimpleNamespace(warm=list(WARM))  # what the Blender pool forks from: bpy imported, nothing run
    assert BwrapPool.wants_warm(warm, run.argv)  # type: ignore[arg-type]
    assert BwrapPool.wants_warm(warm, inspect.argv)  # type: ignore[arg-type]
    assert "/rlvr-blender" in run.mounts and "scene.py" in run.mounts["/rlvr-blender"]


def test_a_report_without_the_nonce_is_not_read() -> None:
    verdict = _verify(_pool(_report(), forge=True))
    assert verdict.score == 0.0 and "could not be inspected" in verdict.checks[-1].detail


def test_wrong_shape_in_the_right_box_fails_the_shape_gate() -> None:
    verdict = _verify(_pool(_report(holes=1, euler=0)))
    assert verdict.score == 0.0 and not verdict.passed
    assert any(c.name == "gate:shape" and not c.passed for c in verdict.checks)
    verdict = _verify(_pool(_report(volume=0.6)))
    assert verdict.score == 0.0 and "volume" in next(c.detail for c in verdict.checks
                                                     if c.name == "gate:shape")


def test_partial_credit_for_a_shifted_object_and_a_wrong_colour() -> None:
    shifted = np.zeros((H, W), dtype=bool)
    shifted[3:7, 2:6] = True
    report = _report(shifted, colour=(20, 200, 20), bounds=[[-0.5, -0.5, 0.2], [0.5, 0.5, 1.2]])
    report["materials"]["M"]["base_color"] = [0.1, 0.8, 0.1]
    verdict = _verify(_pool(report))
    assert not verdict.passed and 0.3 < verdict.score < 1.0
    failing = {c.name for c in verdict.checks if not c.passed}
    assert {"Box:placement", "material:M:colour", "render0:Box:silhouette", "render0:Box:colour"} <= failing
    assert "Box:size" not in failing


def test_missing_objects_glb_and_resources_are_gates() -> None:
    report = _report()
    del report["objects"]["Box"]
    assert _verify(_pool(report)).score == 0.0
    report = _report()
    report["glb"] = {"ok": True, "nodes": [], "meshes": 0}
    assert _verify(_pool(report)).score == 0.0
    report = _report()
    report["images"] = [{"name": "x", "path": "/etc/passwd", "inside": False, "exists": True,
                         "decodes": True}]
    assert _verify(_pool(report)).score == 0.0


def test_failures_are_zero_and_sandbox_faults_infra() -> None:
    assert _verify(_pool(_report(), run_status=ExecStatus.timeout)).score == 0.0
    assert _verify(_pool({"ok": False, "why": "scene.blend was not saved"})).score == 0.0
    infra = _verify(_pool(_report(), run_status=ExecStatus.infra_error))
    assert infra.infra_error and "worker died" in infra.infra_error
    blender._REFERENCES.clear()  # the reference is cached per task: this one must be built again, and fail
    broken_reference = _verify(_pool(_report(), reference={"ok": False, "why": "boom"}))
    assert broken_reference.infra_error and "reference" in broken_reference.infra_error


def test_no_script_is_zero_without_running_anything() -> None:
    pool = _pool(_report())
    verdict = verify(_task(), FinalState(answer="I would model a plate."),
                     VerifyContext(extras={"blender_pool": pool}))
    assert verdict.score == 0.0 and pool.calls == []


def test_missing_blender_names_make_blender(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(blender_env.ENV_VAR, "/nonexistent/python")
    with pytest.raises(UserError, match="make blender"):
        verify(_task(), FinalState(answer=fenced("import bpy\n")), VerifyContext())


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(UserError):
        verify(_task(widht=4), FinalState(answer=fenced("import bpy\n")),
               VerifyContext(extras={"blender_pool": 1}))


def test_shape_gate_and_resource_gate() -> None:
    ref = _report()["objects"]["Box"]["mesh"]
    assert shape_gate("Box", ref, ref, True, 0.1)[0]
    assert not shape_gate("Box", {**ref, "non_manifold_edges": 4}, ref, True, 0.1)[0]
    assert shape_gate("Box", {**ref, "non_manifold_edges": 4}, ref, False, 0.1)[0]
    assert not shape_gate("Box", {**ref, "parts": 2}, ref, True, 0.1)[0]
    assert not shape_gate("Box", {"too_big": 10**7}, ref, True, 0.1)[0]
    ok_img = {"name": "t", "path": "/workspace/t.png", "inside": True, "exists": True, "decodes": True}
    assert resource_gate({"images": [ok_img]})[0]
    assert not resource_gate({"images": [{**ok_img, "exists": False}]})[0]
    assert not resource_gate({"images": [{**ok_img, "packed_bytes": 0}]})[0]
    assert not resource_gate({"images": [{**ok_img, "decodes": False}]})[0]
    assert not resource_gate({"images": [], "libraries": [{"path": "/lib.blend", "inside": False}]})[0]


def test_render_checks_score_iou_and_colour() -> None:
    from rlvr.domains.blender.verifier import decode_frames

    s = BlenderSettings(width=W, height=H)
    ref = _report()
    frames = decode_frames(ref, s), decode_frames(ref, s)
    same = render_checks(["Box"], ref, ref, *frames, s)  # type: ignore[arg-type]
    assert all(c.passed and c.score == 1.0 for c in same)
    empty = copy.deepcopy(ref)
    empty["ids"] = {}
    frames = decode_frames(empty, s), decode_frames(ref, s)
    missing = render_checks(["Box"], empty, ref, *frames, s)  # type: ignore[arg-type]
    assert [c.score for c in missing] == [0.0, 0.0]


def test_the_report_inlines_kept_frames_beside_the_reference(tmp_path: Any) -> None:
    from rlvr.monitor.report import _frames

    png = b"\x89PNG\r\n\x1a\n" + bytes(16)
    (tmp_path / "a.png").write_bytes(png)
    (tmp_path / "r.png").write_bytes(png)
    shown = _frames({"frames": [{"camera": 0, "candidate": str(tmp_path / "a.png"),
                                 "reference": str(tmp_path / "r.png")},
                                {"camera": 1, "candidate": str(tmp_path / "gone.png")},
                                {"camera": 2, "candidate": "/etc/passwd"}]})
    assert len(shown) == 1 and shown[0]["candidate"].startswith("data:image/png;base64,")
    assert shown[0]["reference"] == shown[0]["candidate"]


def test_malformed_candidate_frames_score_zero_not_infra() -> None:
    report = _report()
    report["frames"][0]["ids"] = base64.b64encode(bytes(3)).decode()
    verdict = _verify(_pool(report))
    assert verdict.score == 0.0 and not verdict.infra_error and verdict.checks[-1].name == "gate:rendered"
