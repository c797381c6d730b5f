"""Sandbox latency, throughput, recovery and hygiene, each measured beside its baseline in the same run."""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.sandbox import cgroups
from rlvr.sandbox.pool import BwrapPool, scratch_dir
from rlvr.sandbox.result import ExecLimits

PYTEST_FILES = {"test_small.py": "import pytest\n\n\ndef add(a, b):\n    return a + b\n\n\n"
                + "".join(f"def test_{i}():\n    assert add({i}, 1) == {i + 1}\n\n\n" for i in range(4))
                + "@pytest.mark.parametrize('x', [1])\ndef test_param(x):\n    assert x\n"}
"""A small verification: 5 tests."""


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _time(fn: Callable[[], object], n: int, progress: Callable[[], None] | None = None) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
        if progress:
            progress()
    return out


def _subprocess_python() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)


def _subprocess_pytest() -> None:
    with tempfile.TemporaryDirectory() as d:
        for name, text in PYTEST_FILES.items():
            Path(d, name).write_text(text)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", d], check=True,
                       capture_output=True, cwd=d)


def _parallel(fn: Callable[[], object], threads: int, seconds: float) -> float:
    """Jobs per second when `threads` callers run `fn` back to back for `seconds`."""
    count = [0] * threads
    stop = time.perf_counter() + seconds

    def loop(i: int) -> None:
        while time.perf_counter() < stop:
            fn()
            count[i] += 1

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(count) / (time.perf_counter() - t0)


def run_bench(n: int = 200, progress: Callable[[], None] | None = None) -> dict[str, float]:
    """The flat figures of `rlvr sandbox bench`; `n` trivial jobs set the sample sizes of everything else."""
    res: dict[str, float] = {}
    t0 = time.perf_counter()
    pool = BwrapPool(workers=2, spares=1)
    res["pool_start_s"] = time.perf_counter() - t0
    try:
        trivial = ["python", "-c", "pass"]
        for _ in range(10):
            pool.run(trivial)
        cpu: list[float] = []

        def one() -> None:
            r = pool.run(trivial)
            _check(r)
            cpu.append(r.cpu_s)

        warm = _time(one, n, progress)
        base = _time(_subprocess_python, max(n // 4, 10), progress)
        res |= {"warm_p50_ms": _pct(warm, 0.5) * 1e3, "warm_p99_ms": _pct(warm, 0.99) * 1e3,
                "subprocess_p50_ms": _pct(base, 0.5) * 1e3,
                # CPU the worker's cgroup spent per job (the job, its supervisors and the preparation of
                # the next chain): unlike wall-clock figures it hardly moves with the machine's load
                "warm_job_cpu_ms": statistics.median(cpu) * 1e3}
        res["warm_speedup"] = res["subprocess_p50_ms"] / res["warm_p50_ms"]
        argv = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        sand = _time(lambda: _check(pool.run(argv, files=PYTEST_FILES)), max(n // 10, 5), progress)
        cold = _time(_subprocess_pytest, max(n // 40, 3), progress)
        res |= {"pytest_sandbox_ms": statistics.median(sand) * 1e3,
                "pytest_subprocess_ms": statistics.median(cold) * 1e3}
        res["pytest_speedup"] = res["pytest_subprocess_ms"] / res["pytest_sandbox_ms"]
        res["jobs_per_s"] = _parallel(lambda: _check(pool.run(trivial)), 2, 3.0)
        res["subprocess_jobs_per_s"] = _parallel(_subprocess_python, 2, 3.0)
        res["throughput_speedup"] = res["jobs_per_s"] / res["subprocess_jobs_per_s"]
    finally:
        pool.close()
    res |= measure_recovery(max(n // 40, 3))
    return res


def _check(r: object) -> None:
    if not getattr(r, "ok", False):
        raise RuntimeError(f"benchmark job failed: {r}")


def measure_recovery(rounds: int) -> dict[str, float]:
    """From SIGKILL of the serving worker to the next job's result; baseline: a cold worker start."""
    with BwrapPool(workers=1, spares=1) as pool:
        pool.run(["python", "-c", "pass"])
        times = []
        for _ in range(rounds):
            while pool._spares.qsize() < 1:  # measure with the standby in place
                time.sleep(0.05)
            pid = pool.worker_pids()[0]
            t = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            _check(pool.run(["python", "-c", "pass"]))
            times.append(time.perf_counter() - t)
    t = time.perf_counter()
    with BwrapPool(workers=1, spares=0) as cold:
        _check(cold.run(["python", "-c", "pass"]))
    return {"recovery_ms": statistics.median(times) * 1e3, "cold_worker_ms": (time.perf_counter() - t) * 1e3}


HOSTILE = {
    "ok": ["python", "-c", "print('x')"],
    "crash": ["python", "-c", "import os; os.abort()"],
    "fail": ["python", "-c", "raise SystemExit(3)"],
    "timeout": ["python", "-c", "import time; time.sleep(5)"],
    "fork_bomb": ["python", "-c",
                  "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"],
    "daemon": ["python", "-c", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)"],
    "shell": ["sh", "-c", "sleep 30 & echo started"],
}
"""The job mix of the hygiene run (timeouts and bombs run under HYGIENE_LIMITS)."""
HYGIENE_LIMITS = ExecLimits(timeout_s=0.3, memory_mb=64, processes=16, output_bytes=4096)


def host_state(pool_id: str) -> dict[str, int]:
    """What one pool (by id) has on the host: processes in its cgroups, its mounts, cgroups and temp dirs.

    Counting by pool id keeps the figures exact on a machine where other pools run at the same time.
    """
    procs = 0
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and pool_id in (d / "cgroup").read_text():
                procs += 1
        except OSError:
            continue
    roots = [cgroups.CGROUP_ROOT / c / cgroups.PREFIX for c in ("memory", "pids", "cpuacct")]
    roots += [cgroups.CGROUP_ROOT, cgroups.CGROUP_ROOT / "unified"]
    cg = sum(1 for r in roots if r.is_dir() for d in r.iterdir() if pool_id in d.name)
    mounts = sum(pool_id in line for line in Path("/proc/self/mountinfo").read_text().splitlines())
    temp = sum(1 for root in {scratch_dir(), tempfile.gettempdir()}
               for _ in Path(root).glob(f"rlvr-sbx-{pool_id}-*"))
    return {"sandbox_processes": procs, "mounts": mounts, "cgroups": cg, "temp_dirs": temp}


def run_hygiene(jobs: int, progress: Callable[[], None] | None = None) -> dict[str, int]:
    """Run `jobs` mixed hostile jobs (and kill a worker now and then); return what is left after close."""
    kinds = list(HOSTILE)
    with BwrapPool(workers=2, spares=1) as pool:
        pool_id = pool.pool_id
        for i in range(jobs):
            if i % 500 == 250:
                os.kill(pool.worker_pids()[0], signal.SIGKILL)
            r = pool.run(HOSTILE[kinds[i % len(kinds)]], limits=HYGIENE_LIMITS)
            if r.infra_error:
                raise RuntimeError(f"infra error in hygiene run: {r.error}")
            if progress:
                progress()
    return {f"leftover_{k}": v for k, v in host_state(pool_id).items()}


FIGURE_ROWS = (("trivial job p50 (ms)", "warm_p50_ms", "subprocess_p50_ms", "warm_speedup"),
               ("trivial job p99 (ms)", "warm_p99_ms", None, None),
               ("worker CPU per trivial job (ms)", "warm_job_cpu_ms", None, None),
               ("pytest, 5 tests (ms per run)", "pytest_sandbox_ms", "pytest_subprocess_ms",
                "pytest_speedup"),
               ("trivial jobs/s, 2 workers", "jobs_per_s", "subprocess_jobs_per_s", "throughput_speedup"),
               ("recovery after SIGKILL (ms)", "recovery_ms", "cold_worker_ms", None))
"""(label, figure, baseline figure, ratio figure) of the benchmark's table."""


def figures_table(figures: dict[str, float], title: str = "rlvr sandbox") -> Any:
    """The benchmark figures beside their same-run baselines, as a rich Table."""
    from rich.table import Table

    table = Table("figure", "sandbox", "baseline (same run)", "ratio", title=title)
    for label, a, b, ratio in FIGURE_ROWS:
        table.add_row(label, f"{figures[a]:.1f}", f"{figures[b]:.1f}" if b else "-",
                      f"{figures[ratio]:.2f}x" if ratio else "-")
    return table
