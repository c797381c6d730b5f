"""RayPool on a real two-node local cluster: routing, leases, back pressure, an actor killed mid-job."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray

from rlvr.config import SandboxConfig
from rlvr.sandbox.result import ExecStatus


@pytest.fixture
def pool(ray_cluster):
    from rlvr.scale.ray_pool import RayPool

    p = RayPool(ray_cluster.address, SandboxConfig(isolation="none", workers=1), slots_per_node=2)
    yield p
    p.close()


def test_one_actor_per_node_and_jobs_spread(pool) -> None:
    assert pool.stats()["nodes"] == 2 and pool.stats()["actors"] == 2
    nodes = {ray.get(h.ping.remote())["node"] for h in pool.actor_handles()}
    assert len(nodes) == 2
    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda i: pool.run(["python", "-c", f"print({i} * 2)"]), range(16)))
    assert [r.stdout.strip() for r in results] == [str(i * 2) for i in range(16)]
    assert all(r.status is ExecStatus.ok and r.attempts == 1 for r in results)
    served = [s.served for s in pool._slots]
    assert all(n > 0 for n in served), served


def test_lease_keeps_workspace_between_commands(pool) -> None:
    with pool.lease({"a.txt": "hello"}) as sb:
        r = sb.run(["python", "-c", "open('b.txt','w').write(open('a.txt').read().upper())"])
        assert r.ok, r.stderr
        assert sb.read_files(["b.txt"]) == {"b.txt": "HELLO"}
        sb.write_files({"c.txt": "x"})
        assert set(sb.read_files()) >= {"a.txt", "b.txt", "c.txt"}
    with pool.lease() as sb2:  # a new lease is a fresh workspace
        assert sb2.read_files() == {}


def test_back_pressure_bounds_in_flight(ray_cluster) -> None:
    from rlvr.scale.ray_pool import RayPool

    p = RayPool(ray_cluster.address, SandboxConfig(isolation="none", workers=1), slots_per_node=1)
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, p.stats()["in_flight"])
            time.sleep(0.005)

    t = threading.Thread(target=watch)
    t.start()
    try:
        with ThreadPoolExecutor(6) as ex:
            results = list(ex.map(lambda _: p.run(["python", "-c", "import time; time.sleep(0.3)"]),
                                  range(6)))
    finally:
        stop.set()
        t.join()
        p.close()
    assert all(r.ok for r in results)
    assert peak <= 2  # one slot per node, two nodes: the rest waited instead of queueing


def test_actor_killed_mid_job_is_retried_once_elsewhere(pool) -> None:
    victim = pool._slots[0]
    victim.in_flight = 0
    # make the victim the least loaded so the slow job lands on it
    pool._slots[1].in_flight = 1
    results = []
    th = threading.Thread(target=lambda: results.append(
        pool.run(["python", "-c", "import time; time.sleep(3); print('done')"])))
    th.start()
    time.sleep(1.5)
    pool._slots[1].in_flight = 0
    ray.kill(victim.handle, no_restart=True)
    th.join(timeout=60)
    (res,) = results
    assert res.status is ExecStatus.ok and res.stdout.strip() == "done"
    assert res.attempts == 2  # counted once, after one retry
    assert pool.stats()["replaced"] == 1 and pool.stats()["nodes"] == 2
    assert pool.run(["python", "-c", "print(1)"]).ok  # the replacement serves


def test_lease_on_dead_actor_is_infra_error(pool) -> None:
    with pool.lease() as sb:
        ray.kill(sb._slot.handle, no_restart=True)
        time.sleep(0.5)
        res = sb.run(["python", "-c", "print(1)"])
        assert res.status is ExecStatus.infra_error
        assert res.error
        # the workspace is gone: still infra, never the program's fault
        res2 = sb.run(["python", "-c", "print(1)"])
        assert res2.status is ExecStatus.infra_error


def test_requirements_travel_with_the_job_to_the_node_that_runs_it(pool) -> None:
    """The actor serves a task's requirements on its own node (its venv made there, in that node's cache)."""
    from rlvr.sandbox.requirements import pool_for

    needs = ("pytest", "pytest-mock==3.14.0")
    served = pool_for(pool, needs)
    probe = ["python", "-c", "import pytest_mock; print('has it')"]
    assert served.run(probe).stdout == "has it\n"
    with served.lease({"a.txt": "x"}) as sb:
        assert sb.run(probe).stdout == "has it\n" and sb.read_files(["a.txt"]) == {"a.txt": "x"}
    assert pool.run(probe).exit_code == 1  # the pool's own interpreter has no pytest-mock
