"""The `blender` verifier end to end, in Blender (the `blender` marker: `make test-blender` builds
.venv-blender).

Gold scenes score 1 and every negative control 0; bad input (never saves, crashes Blender, renders forever,
allocates past the limit, a scene that explodes only when inspected) scores 0 with the reason, is never an
infra fault, and leaves no Blender process behind.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr.domains.blender.interpreter import blender_python, make_blender_pool
from rlvr.domains.blender.source import SAVE, fenced
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.proof import prove
from rlvr.verify.verdict import Verdict

pytestmark = [pytest.mark.blender, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def bpool() -> Iterator[SandboxPool]:
    assert blender_python() is not None, "Blender is not installed: run `make blender`"
    pool = make_blender_pool(workers=2)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    src = registry.make("blender")
    return {t.tier: t for t in (src.get(0), src.get(1), src.get(2))}  # type: ignore[misc]


def _blender_processes() -> list[str]:
    """Host processes running the harness (any leak shows up here: the sandbox's PIDs are host PIDs too)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "/rlvr-blender/scene.py" in cmd:
            found.append(f"{pid}: {cmd[:120]}")
    return found


def _judge(pool: SandboxPool, task: Task, script: str, tmp: Path | None = None) -> Verdict:
    extras: dict[str, object] = {"blender_pool": pool}
    if tmp is not None:
        extras["preview_dir"] = str(tmp)
    verdict = verify(task, FinalState(answer=fenced(script)), VerifyContext(extras=extras))
    assert _blender_processes() == []
    return verdict


def _failed(verdict: Verdict) -> str:
    return "; ".join(f"{c.name}: {c.detail}" for c in verdict.checks if not c.passed)


@pytest.mark.parametrize("tier", ["easy", "medium", "hard"])
def test_gold_scores_one_and_every_negative_zero(bpool: SandboxPool, tasks: dict[str, Task],
                                                 tier: str) -> None:
    results = prove(tasks[tier], VerifyContext(extras={"blender_pool": bpool}))
    assert {r.name for r in results} >= {"gold", "empty_script", "never_saves", "precomputed_file",
                                         "imports_reference", "bbox_wrong_shape", "echoed_prompt"}
    assert all(r.ok for r in results), [r.detail for r in results if not r.ok]
    assert _blender_processes() == []


def test_frames_are_kept_beside_the_reference(bpool: SandboxPool, tasks: dict[str, Task],
                                              tmp_path: Path) -> None:
    verdict = _judge(bpool, tasks["easy"], str(tasks["easy"].answer), tmp_path)
    assert verdict.passed and verdict.score == 1.0
    frames = verdict.details["frames"]
    assert len(frames) == 2
    for frame in frames:
        for who in ("candidate", "reference"):
            assert Path(frame[who]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {c.name.split(":")[0] for c in verdict.checks} >= {"render0", "render1", "gate"}


def test_partial_credit_for_a_wrong_colour_and_a_misplaced_camera(bpool: SandboxPool,
                                                                  tasks: dict[str, Task]) -> None:
    task = tasks["easy"]
    gold = str(task.answer)
    script = gold.replace("bpy.context.scene.camera = cam\n",
                          "bpy.context.scene.camera = cam\ncam.location.x += 1\n")
    script = script.replace(SAVE, "for m in bpy.data.materials:\n    m.node_tree.nodes['Principled BSDF']"
                                  ".inputs['Base Color'].default_value = (0.2, 0.9, 0.9, 1)\n" + SAVE)
    verdict = _judge(bpool, task, script)
    assert not verdict.infra_error and not verdict.passed
    assert 0.3 < verdict.score < 1.0, _failed(verdict)
    failing = {c.name for c in verdict.checks if not c.passed}
    assert "Camera:placement" in failing and any(n.endswith(":colour") for n in failing)


def test_never_saves(bpool: SandboxPool, tasks: dict[str, Task]) -> None:
    verdict = _judge(bpool, tasks["easy"], str(tasks["easy"].answer).replace(SAVE, ""))
    assert verdict.score == 0.0 and not verdict.infra_error and "not saved" in _failed(verdict)


def test_blend_without_glb_fails_the_glb_gate(bpool: SandboxPool, tasks: dict[str, Task]) -> None:
    export = "bpy.ops.export_scene.gltf(filepath=os.path.abspath('scene.glb'))\n"
    script = str(tasks["easy"].answer).replace(export, "")
    verdict = _judge(bpool, tasks["easy"], script)
    assert verdict.score == 0.0 and "gate:glb: scene.glb was not written" in _failed(verdict)


def test_crashing_blender_scores_zero(bpool: SandboxPool, tasks: dict[str, Task]) -> None:
    verdict = _judge(bpool, tasks["easy"], "import ctypes\nctypes.string_at(0)\n")
    assert verdict.score == 0.0 and not verdict.infra_error and "gate:runs" in _failed(verdict)


def _limited(task: Task, **limits: float) -> Task:
    return task.model_copy(update={"limits": TaskLimits(**{**task.limits.model_dump(), **limits})})


def test_rendering_forever_times_out(bpool: SandboxPool, tasks: dict[str, Task]) -> None:
    task = _limited(tasks["easy"], exec_timeout_s=8.0)
    script = ("import bpy\nbpy.ops.object.camera_add()\nbpy.context.scene.camera = "
              "bpy.context.active_object\n"
              "bpy.context.scene.render.engine = 'CYCLES'\nbpy.context.scene.cycles.samples = 1 << 20\n"
              "while True:\n    bpy.ops.render.render()\n")
    verdict = _judge(bpool, task, script)
    assert verdict.score == 0.0 and not verdict.infra_error and "timeout" in _failed(verdict)


def test_allocating_past_the_limit(bpool: SandboxPool, tasks: dict[str, Task]) -> None:
    task = _limited(tasks["easy"], memory_mb=1024)
    verdict = _judge(bpool, task, "import bpy\nhog = bytearray(3 << 30)\n")
    assert verdict.score == 0.0 and not verdict.infra_error and "memory_limit" in _failed(verdict)


def test_a_scene_that_explodes_when_inspected_scores_zero(bpool: SandboxPool, tasks: dict[str, Task]) -> None:
    task = tasks["easy"].model_copy(update={"verifier": {"inspect_timeout_s": 15.0,
                                                         "inspect_memory_mb": 1024}})
    # the modifiers are off in the viewport, so the script itself stays cheap; rendering them is not
    bomb = ("import bpy, os\nbpy.ops.mesh.primitive_ico_sphere_add(subdivisions=5)\nobj = "
            "bpy.context.active_object\n"
            "sub = obj.modifiers.new('s', 'SUBSURF')\nsub.show_viewport = False\nsub.render_levels = 6\n"
            "arr = obj.modifiers.new('a', 'ARRAY')\narr.show_viewport = False\narr.count = 1000\n"
            "bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath('scene.blend'))\n")
    verdict = _judge(bpool, task, bomb)
    assert verdict.score == 0.0 and not verdict.infra_error
    assert "could not be inspected" in _failed(verdict)


def test_image_paths_outside_the_workspace_fail_the_resource_gate(bpool: SandboxPool,
                                                                   tasks: dict[str, Task]) -> None:
    leak = ("leak = bpy.data.images.new('Leak', 4, 4)\nleak.source = 'FILE'\nleak.filepath = '/etc/passwd'\n"
            "leak.use_fake_user = True\n")
    verdict = _judge(bpool, tasks["easy"], str(tasks["easy"].answer).replace(SAVE, leak + SAVE))
    assert verdict.score == 0.0 and "outside the workspace" in _failed(verdict)


def test_a_missing_texture_fails_the_resource_gate(bpool: SandboxPool, tasks: dict[str, Task]) -> None:
    task = tasks["hard"]
    script = str(task.answer) + "import glob\nfor p in glob.glob('textures/*.png'):\n    os.remove(p)\n"
    verdict = _judge(bpool, task, script)
    assert verdict.score == 0.0 and "is missing" in _failed(verdict)


def test_scripts_inside_the_saved_scene_never_run_when_it_is_inspected(bpool: SandboxPool,
                                                                        tasks: dict[str, Task]) -> None:
    evil = ("text = bpy.data.texts.new('evil.py')\ntext.write('import "
            "os\\nos._exit(3)\\n')\ntext.use_module = True\n")
    verdict = _judge(bpool, tasks["easy"], str(tasks["easy"].answer).replace(SAVE, evil + SAVE))
    assert verdict.passed and verdict.score == 1.0, _failed(verdict)


def test_render_settings_of_the_scene_cannot_change_the_frames(bpool: SandboxPool,
                                                               tasks: dict[str, Task]) -> None:
    tricks = ("scene = bpy.context.scene\nscene.render.use_border = "
              "True\nscene.render.use_crop_to_border = True\n"
              "scene.render.border_max_x = 0.5\nscene.render.resolution_percentage = 10\n"
              "scene.view_layers.new('Other')\nscene.view_layers[0].samples = 1\n")
    verdict = _judge(bpool, tasks["easy"], str(tasks["easy"].answer).replace(SAVE, tricks + SAVE))
    assert verdict.passed and verdict.score == 1.0, _failed(verdict)
