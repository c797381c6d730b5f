"""A training step and an eval through a real two-node local Ray cluster, with a pool actor killed
mid-step."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import ray
from tests.conftest import ADD_HIDDEN, ADD_WORKSPACE, write_task

from rlvr.commands.eval import run_eval
from rlvr.config import load_config

FIX = "def add(a, b):\n    return a + b\n"
BROKEN = "def add(a, b):\n    return a * b\n"


def _call(name: str, **args: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.fixture
def pack(tmp_path: Path) -> tuple[Path, Path]:
    """Two multi-turn code tasks and a script that fixes one and breaks the other."""
    root = tmp_path / "pack"
    toml = 'id = "{}"\ndomain = "code"\n[limits]\nmax_turns = 4\n'
    write_task(root, "good", toml=toml.format("good"), prompt="Task GOOD: write add.",
               workspace=ADD_WORKSPACE,
               hidden=ADD_HIDDEN)
    write_task(root, "bad", toml=toml.format("bad"), prompt="Task BAD: write add.", workspace=ADD_WORKSPACE,
               hidden=ADD_HIDDEN)
    script = {"match": [
        {"prompt_contains": "Task GOOD",
         "turns": [_call("write_file", path="add.py", content=FIX), _call("submit")]},
        {"prompt_contains": "Task BAD", "turns": [_call("write_file", path="add.py", content=BROKEN),
                                                  _call("submit")]}]}
    sf = tmp_path / "script.json"
    sf.write_text(json.dumps(script))
    return root, sf


def test_eval_through_ray_equals_local(ray_cluster, pack: tuple[Path, Path]) -> None:
    root, script = pack
    local = run_eval(f"scripted:{script}", str(root), k=2, seed=3, show_progress=False)
    remote = run_eval(f"scripted:{script}", str(root), k=2, seed=3, cluster=ray_cluster.address,
                      show_progress=False)
    assert local["domains"]["code"]["n"] == remote["domains"]["code"]["n"] == 2
    assert local["domains"]["code"]["pass@1"] == remote["domains"]["code"]["pass@1"] == 0.5


def test_every_single_turn_episode_records_its_node(ray_cluster, tmp_path: Path) -> None:
    """An eval of single-turn episodes on Ray recorded a node for the few verified and none for those whose
    identical answers the verdict cache served: every episode names the node that did its sandbox work."""
    from rlvr.store import EpisodeStore

    root = tmp_path / "single"
    for name in ("one", "two"):
        write_task(root, name, toml=f'id = "{name}"\ndomain = "code"\n[verifier]\nanswer_file = "add.py"\n',
                   workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    script = tmp_path / "answer.json"
    script.write_text(json.dumps({"default": [FIX]}))  # the same answer in every sample: cache hits
    store = EpisodeStore(tmp_path / "eval")
    rep = run_eval(f"scripted:{script}", str(root), k=4, seed=0, cluster=ray_cluster.address,
                   show_progress=False, store=store)
    eps = store.episodes()
    assert rep["episodes"] == len(eps) == 8 and rep["domains"]["code"]["pass@1"] == 1.0
    assert any(ep.metadata.get("verdict_cached") for ep in eps)
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert all(ep.node is not None for ep in eps), [ep.node for ep in eps]
    assert sum(c["episodes"] for c in rep["nodes"].values()) == 8
    assert all(any(full.startswith(ep.node) for full in alive) for ep in eps)  # short names of live nodes


def test_training_step_through_ray_survives_a_killed_actor(ray_cluster, tmp_path: Path, monkeypatch) -> None:
    from rlvr import run
    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.scale.ray_pool import RayPool
    from rlvr.store import EpisodeStore

    model = build_tiny_model(tmp_path / "model", n_layer=1, n_embd=32, n_head=2, n_positions=256, seed=1)
    pools: list[RayPool] = []
    killed = threading.Event()

    def open_pool(sandbox, fleet):  # the real RayPool, plus a thread that kills one pool actor once jobs flow
        pool = RayPool(fleet.address, sandbox)
        pools.append(pool)

        def killer() -> None:
            deadline = time.monotonic() + 120
            while pool.stats()["served"] < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            ray.kill(pool.actor_handles()[0], no_restart=True)
            killed.set()

        threading.Thread(target=killer, daemon=True).start()
        return pool

    monkeypatch.setattr(run, "open_pool", open_pool)
    cfg = load_config(None, [f'output_dir="{tmp_path}"', 'name="ray"', f'policy.model="{model}"',
                             "policy.max_new_tokens=8", "train.steps=1", "train.batch_size=4",
                             "rollout.group_size=4", "sft.enabled=false", "monitor.tensorboard=false",
                             f'cluster.address="{ray_cluster.address}"', 'tasks.domains.code.tier="tiny"',
                             'tasks.heldout="code:2"',
                             "train.heldout_samples=1"])
    run.train(cfg)
    assert killed.is_set()
    eps = EpisodeStore(cfg.run_dir).episodes()
    assert len(eps) == 16  # nothing lost: every episode is stored, masked ones included
    assert len({e.episode_id for e in eps}) == 16  # and none counted twice
    assert all(e.verdict is not None or e.status == "infra_error" for e in eps)
    assert pools[0].stats()["replaced"] >= 1


def test_eval_with_more_multi_turn_episodes_than_slots_finishes(ray_cluster, pack: tuple[Path, Path]) -> None:
    """Each lease used to hold a job slot for its whole episode: with more episodes than slots, the tool
    threads all waited for a slot while the slots' episodes waited for a tool thread. A lease is not a job
    now."""
    root, script = pack
    cfg = load_config(None, ["sandbox.workers=1", "rollout.tool_workers=2", "rollout.stall_timeout_s=120"])
    rep = run_eval(f"scripted:{script}", str(root), k=6, seed=3, cluster=ray_cluster.address, config=cfg,
                   show_progress=False)  # 12 multi-turn episodes, 2 job slots per node
    assert rep["episodes"] == 12 and rep["domains"]["code"]["pass@1"] == 0.5


def test_training_with_more_multi_turn_episodes_than_slots_finishes(ray_cluster, tmp_path: Path,
                                                                    pack: tuple[Path, Path]) -> None:
    from rlvr import run
    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.store import EpisodeStore

    root, _ = pack
    model = build_tiny_model(tmp_path / "model", n_layer=1, n_embd=32, n_head=2, n_positions=512, seed=1)
    cfg = load_config(None, [f'output_dir="{tmp_path}"', 'name="slots"', f'policy.model="{model}"',
                             "policy.max_new_tokens=8", "train.steps=1", "train.batch_size=2",
                             "rollout.group_size=6",
                             "sft.enabled=false", "monitor.tensorboard=false", "monitor.report=false",
                             f'tasks.train="{root}"', 'tasks.heldout=""', "sandbox.workers=1",
                             "rollout.tool_workers=2", "rollout.stall_timeout_s=120",
                             f'cluster.address="{ray_cluster.address}"'])
    run.train(cfg)
    eps = EpisodeStore(cfg.run_dir).episodes()
    assert len(eps) == 12 and all(e.status != "infra_error" for e in eps)
