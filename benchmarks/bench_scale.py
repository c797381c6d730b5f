"""Scale-out benchmark: verification throughput on the local pool vs a RayPool with one and two nodes.

All on this machine, in one run: the local isolated pool is the baseline; Ray's overhead is the difference in
per-job latency for the same trivial job, and in throughput for the same verifications. Prints one JSON
object.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

from rlvr.config import SandboxConfig
from rlvr.sandbox import make_pool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify

N_VERIFY = int(os.environ.get("BENCH_N", "40"))
N_TRIVIAL = 100
CONCURRENCY = 4

TASK = Task(
    id="add", domain="code", prompt="Write add(a, b).",
    workspace={"add.py": "def add(a, b):\n    raise NotImplementedError\n"},
    hidden={"test_hidden.py": "".join(f"from add import add\n\ndef test_{i}():\n    assert add({i}, 1) "
                                      f"== {i + 1}\n"
                                      for i in range(5))},
    verifier={"tests": ["test_hidden.py"]},
)
GOLD = FinalState(files={"add.py": "def add(a, b):\n    return a + b\n"})


def measure(pool) -> dict[str, float]:
    lat = []
    for _ in range(N_TRIVIAL):
        t0 = time.perf_counter()
        pool.run(["python", "-c", "pass"])
        lat.append((time.perf_counter() - t0) * 1000)
    ctx = VerifyContext(pool=pool)
    verify(TASK, GOLD, ctx)  # warm-up
    t0 = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as ex:
        verdicts = list(ex.map(lambda _: verify(TASK, GOLD, ctx), range(N_VERIFY)))
    wall = time.perf_counter() - t0
    assert all(v.passed for v in verdicts), [v.infra_error for v in verdicts if not v.passed][:3]
    return {"trivial_p50_ms": statistics.median(lat), "verify_per_s": N_VERIFY / wall}


def ray_run(nodes: int) -> dict[str, float]:
    import ray
    from ray.cluster_utils import Cluster

    from rlvr.scale.ray_pool import RayPool

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2 if nodes == 1 else 1,
                                                            "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        with RayPool(cluster.address, SandboxConfig(workers=2 if nodes == 1 else 1)) as pool:
            return measure(pool)
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> int:
    with make_pool(SandboxConfig(workers=2)) as pool:
        local = measure(pool)
    one = ray_run(1)
    two = ray_run(2)
    out = {
        "local_trivial_p50_ms": local["trivial_p50_ms"], "local_verify_per_s": local["verify_per_s"],
        "ray1_trivial_p50_ms": one["trivial_p50_ms"], "ray1_verify_per_s": one["verify_per_s"],
        "ray2_trivial_p50_ms": two["trivial_p50_ms"], "ray2_verify_per_s": two["verify_per_s"],
        "ray_overhead_ms_per_job": one["trivial_p50_ms"] - local["trivial_p50_ms"],
        "ray1_vs_local_throughput": one["verify_per_s"] / local["verify_per_s"],
        "ray2_vs_ray1_throughput": two["verify_per_s"] / one["verify_per_s"],
        "n_verify": N_VERIFY, "concurrency": CONCURRENCY, "cpus": os.cpu_count(),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
