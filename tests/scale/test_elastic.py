"""The sandbox fleet on a real multi-node Ray cluster on this machine whose nodes join, die and drain mid-run
(marker `elastic`, `make test-elastic`; a cluster of its own, since nodes are added and killed).

What is checked, each on real Ray nodes (raylet processes started by `ray.cluster_utils.Cluster` or by `rlvr
node start`): a node that joins gets work; a node killed mid-eval costs only its in-flight episodes, which run
again elsewhere, are stored exactly once, recorded as infra faults and never charged to the policy (every
scripted fix still passes), and `--json` stdout stays parseable; a drained node finishes its work, hands back
what is left before its deadline and is marked drained; `rlvr node start` drains on SIGTERM; idle workers stop
and come back when jobs wait; the autoscaler is asked for what waiting jobs need."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import ADD_HIDDEN, ADD_WORKSPACE, write_task
from tests.scale.conftest import two_nodes

from rlvr.config import ClusterConfig, SandboxConfig

pytestmark = [pytest.mark.elastic, pytest.mark.timeout(600)]

FIX = "def add(a, b):\n    return a + b\n"
RLVR = str(Path(sys.executable).with_name("rlvr"))


def _call(name: str, **args: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    """A cluster of this module's own (its nodes are added and killed), never the session's."""
    with two_nodes() as c:
        yield c


@pytest.fixture
def extra(cluster) -> Iterator[list]:
    """Nodes a test adds (removed after it, dead or alive)."""
    added: list = []
    yield added
    for node in added:
        try:
            cluster.remove_node(node, allow_graceful=False)
        except Exception:  # noqa: BLE001 (already gone: the test killed it)
            pass


def pool(slots: int = 2, **fleet):
    from rlvr.scale.ray_pool import RayPool

    cfg = ClusterConfig(**{"watch_interval_s": 0.5, **fleet})
    return RayPool(None, SandboxConfig(isolation="none", workers=1), fleet=cfg, slots_per_node=slots)


def until(what, timeout_s: float = 60.0, every: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout_s:.0f} s")


def events(p, what: str) -> list[str]:
    return [e["node"] for e in p.events if e["event"] == what]


def test_a_node_that_joins_receives_work(cluster, extra) -> None:
    from rlvr.scale import cluster as ray_cluster

    with pool() as p:
        before = set(p.workers())
        t0 = time.monotonic()
        extra.append(cluster.add_node(num_cpus=1))
        new = until(lambda: set(p.workers()) - before)
        joined_s = time.monotonic() - t0
        (node,) = new
        threads = [threading.Thread(target=p.run, args=(["sleep", "0.5"],)) for _ in range(9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p.stats()["per_node"][ray_cluster.short(node)] >= 1  # the joiner ran jobs
        assert ray_cluster.short(node) in events(p, "joined")
        assert joined_s < 60


@pytest.fixture
def pack(tmp_path: Path) -> tuple[Path, Path]:
    """Multi-turn code tasks whose scripted episodes fix the code, run a slow command and submit."""
    root = tmp_path / "pack"
    toml = 'id = "{}"\ndomain = "code"\n[limits]\nmax_turns = 5\n'
    for i in range(6):
        write_task(root, f"t{i}", toml=toml.format(f"t{i}"), prompt=f"Task T{i}: write add.",
                   workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    turns = [_call("write_file", path="add.py", content=FIX), _call("run", command="sleep 1.5; cat add.py"),
             _call("run", command="sleep 1.5; python -c 'import add'"), _call("submit")]
    sf = tmp_path / "script.json"
    sf.write_text(json.dumps({"default": turns}))
    return root, sf


def test_a_node_killed_mid_eval_costs_only_its_in_flight_episodes(cluster, extra, pack,
                                                                  tmp_path: Path) -> None:
    """`rlvr eval --json` while a node dies under it: every episode still ends (run again elsewhere), each is
    stored once, none is charged to the policy (every scripted fix passes), the lost node is on record, and
    stdout is the JSON alone."""
    from rlvr.store import EpisodeStore

    root, script = pack
    victim = cluster.add_node(num_cpus=1)
    extra.append(victim)
    cluster.wait_for_nodes()
    out_dir = tmp_path / "eval"
    config = tmp_path / "run.toml"
    config.write_text('[rollout]\ninfra_retries = 2\n[sandbox]\nisolation = "none"\n')
    proc = subprocess.Popen([RLVR, "eval", "--cluster", cluster.address, "--policy", f"scripted:{script}",
                             "--tasks", str(root), "-k", "3", "--json", "--output-dir", str(out_dir),
                             "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    time.sleep(12)  # the pool is up and episodes hold workspaces on every node
    cluster.remove_node(victim, allow_graceful=False)
    stdout, stderr = proc.communicate(timeout=400)
    assert proc.returncode == 0, stderr[-3000:]
    assert stdout.startswith("{"), stdout[:2000]  # nothing but the JSON on stdout
    rep = json.loads(stdout)
    assert rep["episodes"] == 18 and rep["masked_episodes"] == 0, rep["first_mask_error"]
    assert rep["domains"]["code"]["pass@1"] == 1.0  # the lost node's episodes were not charged to the policy
    (run_dir,) = [p for p in out_dir.iterdir() if p.is_dir()]
    eps = EpisodeStore(run_dir).episodes()
    assert len(eps) == 18 and len({e.episode_id for e in eps}) == 18  # each stored once
    assert len({(e.task_id, e.sample_index) for e in eps}) == 18
    lost = [e for e in eps if e.lost_nodes]
    assert lost, "the killed node held no workspace: the test did not kill mid-episode"
    assert all(e.infra_retries >= 1 and e.node not in e.lost_nodes for e in lost)
    assert {n for e in lost for n in e.lost_nodes} == {victim.node_id[:12]}
    assert rep["nodes"][victim.node_id[:12]]["lost"] == len(lost)


def test_a_draining_node_finishes_its_work_then_is_left(cluster, extra) -> None:
    from rlvr.scale import cluster as ray_cluster

    node = cluster.add_node(num_cpus=1)
    extra.append(node)
    cluster.wait_for_nodes()
    with pool(handback_s=5) as p:
        until(lambda: node.node_id in p.workers())
        leases, boxes = [], []
        while not any(b.node == ray_cluster.short(node.node_id) for b in boxes):
            cm = p.lease({"x.txt": "kept"})
            leases.append(cm)
            boxes.append(cm.__enter__())
        mine = next(b for b in boxes if b.node == ray_cluster.short(node.node_id))
        assert ray_cluster.drain(node.node_id, grace_s=120)
        until(lambda: ray_cluster.short(node.node_id) in events(p, "draining"))
        for _ in range(4):  # new work goes elsewhere, while the open workspace there still works
            with p.lease() as other:
                assert other.node != mine.node
        assert mine.run(["cat", "x.txt"]).stdout == "kept"
        assert not ray_cluster.is_drained(node.node_id)
        for cm in leases:
            cm.__exit__(None, None, None)
        until(lambda: ray_cluster.is_drained(node.node_id))
        assert node.node_id not in p.workers()


def test_a_drain_deadline_hands_workspaces_back_and_the_episode_goes_on_elsewhere(cluster, extra) -> None:
    from rlvr.envs.env import Env
    from rlvr.scale import cluster as ray_cluster
    from rlvr.tasks.spec import Task, TaskLimits

    node = cluster.add_node(num_cpus=1)
    extra.append(node)
    cluster.wait_for_nodes()
    task = Task(id="t", domain="code", prompt="write add", workspace=dict(ADD_WORKSPACE),
                hidden=dict(ADD_HIDDEN),
                limits=TaskLimits(max_turns=5))
    with pool(handback_s=10) as p:
        until(lambda: node.node_id in p.workers())
        held = []
        for _ in range(6):  # an Env whose workspace is on the node to drain
            env = Env(p, infra_retries=2)
            env.reset(task)
            held.append(env)
            if env.nodes[-1] == ray_cluster.short(node.node_id):
                break
        env = held[-1]
        assert env.nodes == [ray_cluster.short(node.node_id)]
        env.step(_call("write_file", path="add.py", content=FIX))
        assert ray_cluster.drain(node.node_id, grace_s=8)  # inside handback_s: hand back at the next look
        until(lambda: ray_cluster.short(node.node_id) in events(p, "handed back"))
        res = env.step(_call("run", command="cat add.py"))
        assert "a + b" in res.messages[-1].content  # rebuilt elsewhere with the change replayed
        assert env.nodes[0] == ray_cluster.short(node.node_id) and env.nodes[-1] != env.nodes[0]
        assert env.final_state().files["add.py"] == FIX
        for e in held:
            e.close()
        until(lambda: ray_cluster.is_drained(node.node_id))


def test_rlvr_node_start_drains_on_sigterm(cluster) -> None:
    from rlvr.scale import cluster as ray_cluster

    with pool(handback_s=5) as p:
        before = set(p.workers())
        agent = subprocess.Popen([RLVR, "node", "start", "--address", cluster.address, "--grace-s", "60",
                                  "--",
                                  "--num-cpus", "1"], stderr=subprocess.PIPE, text=True)
        try:
            (node_id,) = until(lambda: set(p.workers()) - before, timeout_s=90)
            short = ray_cluster.short(node_id)
            cms, boxes = [], []
            while not any(b.node == short for b in boxes):
                cms.append(p.lease({"f": "1"}))
                boxes.append(cms[-1].__enter__())
            agent.send_signal(signal.SIGTERM)
            until(lambda: short in events(p, "draining"))
            mine = next(b for b in boxes if b.node == short)
            assert mine.run(["cat", "f"]).stdout == "1"  # in-flight work finishes during the grace period
            for cm in cms:
                cm.__exit__(None, None, None)
            t0 = time.monotonic()
            assert agent.wait(timeout=60) == 0
            assert time.monotonic() - t0 < 30  # stopped once drained, not at the deadline
            stderr = agent.stderr.read()
            assert "rlvr node: drained: " in stderr and "deadline reached" not in stderr
            until(lambda: node_id not in ray_cluster.alive_nodes())
        finally:
            if agent.poll() is None:
                agent.kill()


def test_idle_workers_stop_and_come_back_when_jobs_wait(cluster) -> None:
    from rlvr.scale import cluster as ray_cluster

    with pool(sandbox_workers_min=1, sandbox_workers_max=2, scale_down_idle_s=1.0, scale_up_wait_s=0.5,
              slots=1) as p:
        assert len(events(p, "joined")) == 2
        until(lambda: events(p, "down"))  # idle for a second: one worker stops, one stays (the min)
        assert len(p.workers()) == 1
        threads = [threading.Thread(target=p.run, args=(["sleep", "2"],)) for _ in range(4)]
        for t in threads:
            t.start()
        until(lambda: events(p, "up"))  # jobs waited: the idle node is used again before asking for more
        assert events(p, "up") == events(p, "down")[:1]
        until(lambda: len(p.workers()) == 2, timeout_s=10)
        assert {ray_cluster.short(n) for n in p.workers()} == set(events(p, "joined"))
        assert not events(p, "asked")  # an idle node was there, and the max is reached: nothing asked
        for t in threads:
            t.join()


def test_waiting_jobs_ask_the_autoscaler_for_more(cluster) -> None:
    """No idle node to reuse: the fleet asks Ray's autoscaler (`request_resources`) for one more worker's
    bundle, as a KubeRay cluster would read it, and withdraws the request when it closes."""
    from ray.experimental.internal_kv import _internal_kv_get

    def asked() -> int:  # what Ray's (v1) autoscaler, KubeRay's default, reads: a list of bundles
        raw = _internal_kv_get(b"autoscaler_resource_request")
        return len(json.loads(raw)) if raw else 0

    with pool(scale_up_wait_s=0.5, slots=1, sandbox_workers_max=3) as p:
        threads = [threading.Thread(target=p.run, args=(["sleep", "3"],)) for _ in range(4)]
        for t in threads:
            t.start()
        until(lambda: events(p, "asked"))
        assert until(lambda: asked() == 3, timeout_s=10)  # the two workers it has, and one more
        for t in threads:
            t.join()
    assert until(lambda: asked() == 0, timeout_s=10)


def test_a_min_the_cluster_cannot_place_is_one_line(cluster) -> None:
    from rlvr.errors import UserError
    from rlvr.scale.ray_pool import RayPool

    with pytest.raises(UserError, match="sandbox_workers_min = 5 but only 2 sandbox workers") as exc:
        # long enough for the two placeable workers to start on a loaded machine: the message counts them
        RayPool(None, SandboxConfig(isolation="none", workers=1), fleet=ClusterConfig(sandbox_workers_min=5),
                connect_timeout_s=20)
    assert exc.value.field == "cluster.sandbox_workers_min" and "\n" not in str(exc.value)


def test_a_node_killed_mid_training_step_loses_no_episode(cluster, extra, pack, tmp_path: Path,
                                                          monkeypatch) -> None:
    """`rlvr train` on multi-turn tasks while a node holding workspaces dies mid-step: every step's episodes
    are stored exactly once, and the ones whose workspace was lost went on elsewhere (or were masked): none is
    judged on a workspace that was lost."""
    from rlvr import run
    from rlvr.config import load_config
    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.scale import cluster as ray_cluster
    from rlvr.scale.ray_pool import RayPool
    from rlvr.store import EpisodeStore

    root, _ = pack
    victim = cluster.add_node(num_cpus=1)
    extra.append(victim)
    cluster.wait_for_nodes()
    short = ray_cluster.short(victim.node_id)
    killed = threading.Event()

    # the run's real RayPool, and a thread that kills the victim once it holds leases
    def open_pool(sandbox, fleet):
        p = RayPool(fleet.address, sandbox, fleet=fleet)

        def killer() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if any(s.node == short and s.leases for s in p._slots):
                    cluster.remove_node(victim, allow_graceful=False)
                    killed.set()
                    return
                time.sleep(0.01)

        threading.Thread(target=killer, daemon=True).start()
        return p

    monkeypatch.setattr(run, "open_pool", open_pool)
    model = build_tiny_model(tmp_path / "model", n_layer=1, n_embd=32, n_head=2, n_positions=512, seed=1)
    cfg = load_config(None, [f'output_dir="{tmp_path}"', 'name="kill"', f'policy.model="{model}"',
                             "policy.max_new_tokens=8", "train.steps=2", "train.batch_size=3",
                             "rollout.group_size=4",
                             "rollout.infra_retries=2", "sft.enabled=false", "monitor.tensorboard=false",
                             "monitor.report=false", f'tasks.train="{root}"', 'tasks.heldout=""',
                             'sandbox.isolation="none"', "cluster.watch_interval_s=0.5",
                             f'cluster.address="{cluster.address}"'])
    run.train(cfg)
    assert killed.is_set()
    eps = EpisodeStore(cfg.run_dir).episodes()
    for step in (0, 1):
        mine = [e for e in eps if e.step == step]
        assert len(mine) == 12 and len({e.episode_id for e in mine}) == 12  # every episode, stored once
    lost = [e for e in eps if short in e.lost_nodes]
    assert lost, "the victim held workspaces but no episode records losing one"
    for e in lost:
        assert e.infra_retries >= 1
        assert e.masked or (e.node != short and e.verdict is not None and e.verdict.infra_error is None)
    assert all(e.node != short for e in eps if e.step == 1)  # the second step never saw the dead node
