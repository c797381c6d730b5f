"""cgroups on this host: detection, limits and usage per job, removal of stale pools."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import cgroups


def test_detects_a_backend_here() -> None:
    backend = cgroups.detect("test-probe")
    assert backend.name in ("v1", "v2")


def test_refuses_clearly_without_cgroups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path)
    with pytest.raises(SandboxUnavailable) as exc:
        cgroups.detect("x")
    assert "cgroup" in str(exc.value) and "\n" not in str(exc.value)


def test_limits_and_usage_of_a_real_process() -> None:
    backend = cgroups.detect(f"{os.getpid()}-unit")
    cg = backend.worker(0)
    try:
        before = cg.prepare(memory_mb=64, processes=8)
        procs = [d / "cgroup.procs" for d in cg.dirs.values()]
        code = ("import sys\nfor p in sys.argv[1:]:\n    open(p, 'w').write('0')\n"
                "x = bytearray(150 * 2**20)\nx[::4096] = b'1' * len(x[::4096])")
        r = subprocess.run([sys.executable, "-c", code, *map(str, procs)], capture_output=True, check=False)
        assert r.returncode == -9
        use = cg.usage(before)
        assert use.oom_killed and not use.pids_hit and use.peak_memory_mb > 32
    finally:
        cg.destroy()
        for d in backend.pool_dirs():
            cgroups._destroy_tree(d)
    assert not any(d.exists() for d in cg.dirs.values())


def test_sweep_removes_cgroups_of_dead_pools() -> None:
    backend = cgroups.detect("999999999-dead")
    cg = backend.worker(0)
    assert all(d.exists() for d in cg.dirs.values())
    cgroups.sweep_stale(set())
    assert not any(d.exists() for d in cg.dirs.values())


def test_each_job_gets_its_own_limits_and_fresh_counters() -> None:
    backend = cgroups.detect(f"{os.getpid()}-limits")
    cg = backend.worker(0)
    mem_file, pids_dir = ("memory.max", "unified") if backend.name == "v2" else ("memory.limit_in_bytes",
                                                                                 "pids")
    mem_dir = "unified" if backend.name == "v2" else "memory"
    try:
        for memory_mb, processes in [(64, 8), (128, 8), (64, 16), (64, 16)]:
            before = cg.prepare(memory_mb=memory_mb, processes=processes)
            assert int((cg.dirs[mem_dir] / mem_file).read_text()) == memory_mb << 20
            assert int((cg.dirs[pids_dir] / "pids.max").read_text()) == processes
            use = cg.usage(before)  # nothing ran in the cgroup since prepare: every per-job figure is zero
            assert use.cpu_s == 0 and not use.oom_killed and not use.pids_hit
    finally:
        cg.destroy()
        for d in backend.pool_dirs():
            cgroups._destroy_tree(d)
    assert not any(d.exists() for d in cg.dirs.values())
