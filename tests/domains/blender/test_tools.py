"""The multi-turn blender tools: registered for blender tasks only; in Blender (marker `blender`) they run the
script, report the scene and draw the fixed cameras' silhouettes, and the episode's solution.py is judged."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlvr.domains.blender.interpreter import make_blender_pool
from rlvr.domains.blender.settings import BlenderSettings
from rlvr.domains.blender.tools import describe, silhouettes
from rlvr.envs.tools import ToolContext, call_tool, tools_for
from rlvr.sandbox import make_pool
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.limits import for_task
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify


def test_blender_tasks_get_the_scene_tools_and_others_do_not() -> None:
    multi = registry.make("blender", max_turns=6).get(0)
    assert multi.multi_turn and "run_scene" in multi.prompt
    assert {"run_scene", "render_preview", "write_file", "submit"} <= set(tools_for(multi))
    assert "run_scene" not in tools_for(registry.make("code").get(0))


def test_report_and_silhouettes_as_text() -> None:
    from tests.domains.blender.test_checks import W, _report

    report = _report()
    text = describe(report)
    assert "Box [MESH]" in text and "1 part(s)" in text and "scene.glb: ok" in text
    drawing = silhouettes(report, BlenderSettings(width=W, height=W))
    assert "A = Box" in drawing and "camera 0:" in drawing and "A" in drawing.split("camera 0:")[1]


@pytest.fixture(scope="module")
def pools() -> Iterator[tuple[SandboxPool, SandboxPool]]:
    with make_pool(workers=1) as main, make_blender_pool(workers=1) as blender:
        yield main, blender


@pytest.mark.blender
@pytest.mark.timeout(600)
def test_run_preview_and_judge_an_episode(pools: tuple[SandboxPool, SandboxPool],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.domains.blender import interpreter as blender_env

    main, bpool = pools
    monkeypatch.setattr(blender_env, "blender_pool", lambda ctx: bpool)
    monkeypatch.setattr("rlvr.domains.blender.tools.blender_pool", lambda ctx: bpool)
    task: Task = registry.make("blender", max_turns=6, tier="easy").get(0)
    with main.lease() as sandbox:
        ctx = ToolContext(sandbox, task, for_task(main, task))
        broken = call_tool("run_scene", ctx, {"script": "import bpy\nraise RuntimeError('oops')\n"})
        assert broken.content.startswith("[exit_nonzero]") and "oops" in broken.content
        done = call_tool("run_scene", ctx, {"script": str(task.answer)})
        assert (done.content.startswith("[ok]") and "Plate [MESH]" in done.content
                and "Camera [CAMERA]" in done.content)
        preview = call_tool("render_preview", ctx, {})
        assert "= Plate" in preview.content and "camera 1:" in preview.content
        files = sandbox.read_files(None)
    verdict = verify(task, FinalState(files=files, answer="done"),
                     VerifyContext(extras={"blender_pool": bpool}))
    assert verdict.passed and verdict.score == 1.0
