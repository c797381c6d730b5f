"""The elastic sandbox fleet on a real multi-node Ray cluster on this machine (`ray.cluster_utils.Cluster`:
each node its own raylet process), in one run:

- **join**: a stream of jobs runs on a one-node fleet; a node is added; seconds from `add_node` returning to
  the first job the new node ran (the fleet's watcher looks every `watch_interval_s`, default 2 s);
- **throughput, 1 node against 2**: the same CPU-bound jobs (each `python -c` summing 3M integers in the
  sandbox, one job slot per node) on the fleet before and after the join; the ratio;
- **kill**: a multi-turn eval (scripted fixes of `add`, each episode a write, two slow commands and a submit,
  so that every node holds workspaces) while the node with the most workspaces is SIGKILLed; episodes planned,
  finished, stored, masked, passed, and those whose workspace was lost and rebuilt elsewhere. Goal: 0 lost, 0
  charged to the policy.

Two cores here: two 1-CPU nodes share them with the driver, so the 1-vs-2 ratio is bounded by the machine, not
the fleet. Prints one JSON object (`--json PATH` writes it too).
Run: `.venv/bin/python benchmarks/bench_elastic.py [--jobs 24] [--episodes 24]`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

JOB = ["python3", "-c", "print(sum(range(3_000_000)))"]
FIX = "def add(a, b):\n    return a + b\n"


def _call(name: str, **args: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def throughput(pool, jobs: int) -> float:
    """Jobs per second for `jobs` CPU-bound jobs, submitted by as many threads as the fleet has slots x 2."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as ex:
        results = list(ex.map(lambda _: pool.run(JOB), range(jobs)))
    bad = [r for r in results if r.status.value != "ok"]
    if bad:
        raise RuntimeError(f"{len(bad)} jobs failed: {bad[0].status} {bad[0].error}")
    return jobs / (time.perf_counter() - t0)


def join_and_throughput(cluster, jobs: int) -> dict:
    from rlvr.config import ClusterConfig, SandboxConfig
    from rlvr.scale import cluster as ray_cluster
    from rlvr.scale.ray_pool import RayPool

    fleet = ClusterConfig(watch_interval_s=2.0)
    with RayPool(None, SandboxConfig(workers=1), fleet=fleet, slots_per_node=1) as pool:
        one = throughput(pool, jobs)
        stop = threading.Event()

        def stream() -> None:
            while not stop.is_set():
                pool.run(["true"])

        streams = [threading.Thread(target=stream, daemon=True) for _ in range(3)]
        for t in streams:
            t.start()
        t0 = time.monotonic()
        node = cluster.add_node(num_cpus=1)
        short = ray_cluster.short(node.node_id)
        while pool.stats()["per_node"].get(short, 0) == 0:
            if time.monotonic() - t0 > 120:
                raise RuntimeError("the new node ran nothing within 120 s")
            time.sleep(0.05)
        first_s = time.monotonic() - t0
        stop.set()
        for t in streams:
            t.join()
        two = throughput(pool, jobs)
    return {"join_to_first_job_s": round(first_s, 2), "jobs_per_s_1_node": round(one, 3),
            "jobs_per_s_2_nodes": round(two, 3), "throughput_ratio_2_vs_1": round(two / one, 2)}


def kill_mid_eval(cluster, episodes: int, tmp: Path) -> dict:
    from tests.conftest import ADD_HIDDEN, ADD_WORKSPACE, write_task

    from rlvr.commands.eval import run_eval
    from rlvr.config import load_config
    from rlvr.store import EpisodeStore

    root = tmp / "pack"
    for i in range(episodes // 3):
        write_task(root, f"t{i}", toml=f'id = "t{i}"\ndomain = "code"\n[limits]\nmax_turns = 5\n',
                   prompt=f"Task T{i}: write add.", workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    script = tmp / "script.json"
    script.write_text(json.dumps({"default": [
        _call("write_file", path="add.py", content=FIX), _call("run", command="sleep 1.5; cat add.py"),
        _call("run", command="sleep 1.5; python3 -c 'import add'"), _call("submit")]}))
    victim = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    out = tmp / "eval"
    store = EpisodeStore(out)
    cfg = load_config(None, ["rollout.infra_retries=2"])
    killer = threading.Timer(12.0, lambda: cluster.remove_node(victim, allow_graceful=False))
    killer.start()
    t0 = time.perf_counter()
    rep = run_eval(f"scripted:{script}", str(root), k=3, seed=0, cluster=cluster.address, config=cfg,
                   out_dir=out, store=store, show_progress=False)
    wall = time.perf_counter() - t0
    killer.join()
    eps = EpisodeStore(out).episodes()
    planned = (episodes // 3) * 3
    rebuilt = [e for e in eps if e.lost_nodes]
    return {"planned": planned, "finished": rep["episodes"], "stored": len(eps),
            "stored_once": len({e.episode_id for e in eps}) == len(eps),
            "lost": planned - len({(e.task_id, e.sample_index) for e in eps}),
            "masked": rep["masked_episodes"],
            "passed": sum(e.passed for e in eps), "rebuilt_elsewhere": len(rebuilt),
            "killed_node": victim.node_id[:12], "nodes": rep["nodes"], "wall_s": round(wall, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        joined = join_and_throughput(cluster, args.jobs)
        with tempfile.TemporaryDirectory() as tmp:
            killed = kill_mid_eval(cluster, args.episodes, Path(tmp))
    finally:
        ray.shutdown()
        cluster.shutdown()
    result = {"benchmark": "elastic", "date": time.strftime("%Y-%m-%d"),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
              "join": joined, "kill": killed}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
