"""One verdict everywhere: for fixed tasks and final states, every adapter's reward is `rlvr verify`'s
score."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import skyrl_gym
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient

from rlvr.envs.parse import CLOSE, OPEN
from rlvr.integrations.skyrl import register
from rlvr.integrations.trl import environment_factory
from rlvr.integrations.verl import compute_score, rows
from rlvr.tasks.spec import FinalState
from rlvr.verify.base import VerifyContext, verify
from tests.integrations.servers import serve, write_add_pack

pytestmark = pytest.mark.integrations

FINAL = {"gold": "def add(a, b):\n    return a + b\n", "wrong": "def add(a, b):\n    return a - b\n",
         "half": "def add(a, b):\n    return 5\n", "stub": None}
"""add.py at the end of each episode (None: untouched)."""


def _openenv(url: str, content: str | None) -> float:
    async def run() -> float:
        async with MCPToolClient(base_url=url) as env:
            await env.reset(task="code/add")
            if content is not None:
                await env.call_tool("write_file", path="add.py", content=content)
            end = await env.step(CallToolAction(tool_name="submit", arguments={}))
            assert end.done and end.reward == end.observation.metadata["reward"]
            return float(end.reward)
    return asyncio.run(run())


def test_every_adapter_gives_rlvr_verifys_score(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pack = write_add_pack(tmp_path / "pack", names=("add",))
    spec = str(pack)
    expected: dict[str, float] = {}
    for name, content in FINAL.items():
        ws = tmp_path / "ws" / name
        ws.mkdir(parents=True)
        shipped = pack / "add" / "workspace"
        for rel, text in {"add.py": (shipped / "add.py").read_text(),
                          "test_visible.py": (shipped / "test_visible.py").read_text()}.items():
            (ws / rel).write_text(content if rel == "add.py" and content is not None else text)
        r = cli(["verify", str(pack / "add"), str(ws), "--json"])
        assert r.code == 0, r.stderr
        verdict = json.loads(r.stdout)
        assert verdict["infra_error"] is None and bool(verdict["flags"]) == (name == "stub")  # no_change
        # a flagged verdict earns the penalty, 0
        expected[name] = 0.0 if verdict["flags"] else verdict["score"]
    assert expected["gold"] == 1.0 and expected["wrong"] == expected["stub"] == 0.0  # "half": whatever the
    # verifier decides for one hidden test of two (partial credit, or 0 when its fresh cases disagree)

    Env = environment_factory(spec)
    env_id = register("rlvr-one-verdict", tasks=spec)
    got: dict[str, dict[str, float]] = {name: {} for name in FINAL}
    try:
        with serve(spec, tmp=tmp_path) as server:
            for name, content in FINAL.items():
                got[name]["openenv"] = _openenv(server.url, content)
                trl_env = Env()
                trl_env.reset(task_id="code/add")
                if content is not None:
                    trl_env.write_file(path="add.py", content=content)
                trl_env.submit()
                got[name]["trl"] = trl_env.get_reward()  # type: ignore[assignment]
                sky = skyrl_gym.make(env_id, extras={"task": "code/add"})
                sky.init([])
                write = OPEN + json.dumps({"name": "write_file",
                                           "arguments": {"path": "add.py", "content": content}}) + CLOSE
                out = sky.step((write if content is not None else "") + OPEN + '{"name": "submit"}' + CLOSE)
                assert out["done"]
                got[name]["skyrl"] = out["reward"]
                sky.close()
    finally:
        Env.runtime.close()
        skyrl_gym.envs.registration.deregister(env_id)
    for name in FINAL:
        assert got[name] == {k: expected[name] for k in ("openenv", "trl", "skyrl")}, (name, got[name],
                                                                                       expected)


def test_verl_reward_is_the_verifiers_score_for_single_turn_answers(
        answer_tasks) -> None:  # type: ignore[no-untyped-def]
    # `rlvr verify` judges a workspace directory; for answer tasks the same function judges the answer
    for row, task in zip(rows(answer_tasks), answer_tasks, strict=True):
        for answer in (task.answer, "<answer>9</answer>", f"<answer>{task.answer}</answer>", ""):
            want = verify(task, FinalState(files={}, answer=answer), VerifyContext()).score
            got = compute_score(row["data_source"], answer, row["reward_model"]["ground_truth"],
                                row["extra_info"])
            assert got["score"] == want
