"""The benchmark's own machinery: recovery after SIGKILL and the hygiene count after hostile jobs."""
from __future__ import annotations

from rlvr.sandbox.bench import host_state, measure_recovery, run_hygiene


def test_host_state_counts_what_a_live_pool_holds(pool) -> None:
    state = host_state(pool.pool_id)
    assert state["sandbox_processes"] >= 3 and state["cgroups"] >= 2 and state["temp_dirs"] == 1
    assert state["mounts"] == 0  # a pool never mounts anything on the host


def test_recovery_is_measured_beside_a_cold_start() -> None:
    figures = measure_recovery(1)
    assert 0 < figures["recovery_ms"] < figures["cold_worker_ms"]


def test_a_short_hostile_run_leaves_nothing() -> None:
    leftovers = run_hygiene(14)
    assert leftovers == {"leftover_sandbox_processes": 0, "leftover_mounts": 0, "leftover_cgroups": 0,
                         "leftover_temp_dirs": 0}
