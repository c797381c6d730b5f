"""Mesh verification: geometry checks in-process, hostile exports through a fake sandbox, previews."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
import trimesh

from rlvr.domains.mesh import verifier as mesh_module
from rlvr.domains.mesh.verifier import MAX_FACES, MeshVerifier, geometry_checks, load_mesh, render_preview
from rlvr.sandbox.fake import FakeCall, FakePool
from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.extract import extract_script

SPEC = {"volume": 1000.0, "extents": [10, 10, 10], "bodies": 1, "holes": 0, "volume_rel_tol": 0.02,
        "extent_abs_tol": 0.05}


def _stl(mesh: trimesh.Trimesh) -> bytes:
    buf = io.BytesIO()
    mesh.export(buf, file_type="stl")
    return buf.getvalue()


def _score(mesh: trimesh.Trimesh, spec: dict[str, Any] = SPEC) -> tuple[float, list[Any], list[Any]]:
    gates, checks = geometry_checks(mesh, spec)
    if not all(g.passed for g in gates):
        return 0.0, gates, checks
    return sum(c.score for c in checks) / len(checks), gates, checks


def test_exact_part_passes_every_check() -> None:
    assert _score(trimesh.creation.box(extents=[10, 10, 10]))[0] == 1.0


def test_partial_credit_for_a_part_lying_the_wrong_way() -> None:
    score, _, checks = _score(trimesh.creation.box(extents=[20, 10, 5]), {**SPEC, "extents": [10, 10, 20]})
    assert score == pytest.approx(3 / 5)  # volume, y and holes right; x and z wrong
    assert [c.name for c in checks if not c.passed] == ["extent:x", "extent:z"]


def test_holes_from_the_euler_characteristic() -> None:
    tube = trimesh.creation.annulus(r_min=2, r_max=5, height=10, sections=64)
    _, _, checks = _score(tube, {**SPEC, "holes": 1})
    assert next(c for c in checks if c.name == "holes").passed


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # trimesh's inertia of an open mesh divides by zero
def test_open_or_inverted_meshes_fail_the_gates() -> None:
    box = trimesh.creation.box(extents=[10, 10, 10])
    open_box = trimesh.Trimesh(box.vertices, box.faces[:-2], process=False)
    assert _score(open_box)[0] == 0.0
    flipped = box.copy()
    flipped.faces[:3] = flipped.faces[:3, ::-1]
    score, gates, _ = _score(flipped)
    assert score == 0.0 and not next(g for g in gates if g.name == "gate:winding").passed
    two = trimesh.util.concatenate([box, box.copy().apply_translation([20, 0, 0])])
    assert _score(two)[0] == 0.0


@pytest.mark.parametrize("data,name", [(b"", "out.stl"), (b"solid x\nfacet garbage\n", "out.stl"),
                                       (b"\x00" * 84, "out.stl"), (b"v 1 2\nf 9 9 9\n", "out.obj")])
def test_malformed_files_are_refused(data: bytes, name: str) -> None:
    with pytest.raises(ValueError):
        load_mesh(data, name)


def test_too_many_faces_or_bytes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    sphere = _stl(trimesh.creation.icosphere(subdivisions=3))
    assert load_mesh(sphere, "out.stl") is not None and MAX_FACES > 1280
    monkeypatch.setattr(mesh_module, "MAX_FACES", 1000)
    with pytest.raises(ValueError, match="face limit"):
        load_mesh(sphere, "out.stl")
    monkeypatch.setattr(mesh_module, "MAX_MESH_BYTES", 1000)
    with pytest.raises(ValueError, match="byte limit"):
        load_mesh(sphere, "out.stl")


def test_extract_script() -> None:
    assert extract_script("<answer>\n```python\nprint(1)\n```\n</answer>") == ("print(1)\n", "")
    assert extract_script("<answer>print(2)</answer>") == ("print(2)", "")
    assert extract_script("Here:\n```python\nprint(3)\n```") == ("print(3)\n", "")
    assert extract_script("<answer>a</answer><answer>b</answer>")[0] is None
    assert extract_script("no code")[0] is None


def _task() -> Task:
    return registry.make("mesh", part="blocks", tier="easy").get(0)


def _fake(dump_stdout: str, run_status: ExecStatus = ExecStatus.ok) -> FakePool:
    def handler(call: FakeCall) -> ExecResult:
        if call.argv[1] == "-I":
            return ExecResult(status=ExecStatus.ok, exit_code=0, stdout=dump_stdout)
        return ExecResult(status=run_status, exit_code=0 if run_status is ExecStatus.ok else 1, stderr="boom")
    return FakePool(handler)


def _verify(pool: FakePool, answer: str = "<answer>print(1)</answer>") -> Any:
    return MeshVerifier(VerifyContext(pool=pool)).verify(_task(), FinalState(answer=answer))


def test_hostile_exports_score_zero_without_crashing() -> None:
    assert _verify(_fake("MISSING\n")).score == 0.0
    assert _verify(_fake("TOO_BIG out.stl 999999999\n")).score == 0.0
    assert _verify(_fake("MESH out.stl\n!!!not base64!!!")).score == 0.0
    assert _verify(_fake("MESH out.stl\n" + base64.b64encode(b"\x00" * 1000).decode())).score == 0.0
    assert _verify(_fake("anything", ExecStatus.timeout)).score == 0.0


def test_script_runs_alone_in_the_workspace_and_the_dump_is_isolated() -> None:
    pool = _fake("MISSING\n")
    _verify(pool)
    run, dump = pool.calls
    assert run.argv == ["python", "solution.py"] and set(run.files) == {"solution.py"}
    assert dump.argv[:2] == ["python", "-I"]


def test_sandbox_failure_is_infra_not_zero() -> None:
    pool = FakePool(lambda call: ExecResult(status=ExecStatus.infra_error, error="worker died"))
    verdict = _verify(pool)
    assert verdict.infra_error and "worker died" in verdict.infra_error


def test_exported_mesh_is_judged_in_process(tmp_path: Path) -> None:
    src = registry.make("mesh", part="blocks", tier="easy")
    task = src.get(0)
    spec_extents = json.loads(task.hidden["spec.json"])["extents"]
    size = spec_extents[1]
    gap = (spec_extents[0] - 2 * size)
    cubes = [trimesh.creation.box(extents=[size] * 3).apply_translation([size / 2 + k * (size + gap), 0,
                                                                         size / 2])
             for k in range(2)]
    stl = base64.b64encode(_stl(trimesh.util.concatenate(cubes))).decode()
    verifier = MeshVerifier(VerifyContext(pool=_fake(f"MESH out.stl\n{stl}"),
                                          extras={"preview_dir": tmp_path}))
    verdict = verifier.verify(task, FinalState(answer="<answer>print(1)</answer>"))
    assert verdict.score == 1.0 and verdict.passed
    assert Path(verdict.details["preview"]).is_file()


def test_preview_is_skipped_cleanly_when_it_cannot_render(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert render_preview(trimesh.creation.box(), blocker / "sub" / "p.png") is False


def test_file_declaring_a_billion_vertices_is_refused_safely() -> None:
    header = (b"ply\nformat binary_little_endian 1.0\nelement vertex 1000000000\nproperty float x\n"
              b"property float y\nproperty float z\nelement face 1000000000\n"
              b"property list uchar int vertex_indices\nend_header\n" + b"\x00" * 64)
    verdict = _verify(_fake("MESH out.ply\n" + base64.b64encode(header).decode()))
    assert verdict.score == 0.0 and not verdict.infra_error
