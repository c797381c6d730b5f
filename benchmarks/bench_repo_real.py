"""The repo-real pack: how long it took to build, what one verification costs beside the project's own test
command on the same files, how many candidates each generator kept, and pass@1 of the scripted gold policy
(must be 100 %) and of a policy that submits the broken tree untouched (the floor).

Needs the built pack (`make repo-real`). `python benchmarks/bench_repo_real.py [N]` (N sampled tasks, default 6).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def own_command_s(task, test_files: list[str]) -> float:
    """The project's own test command (plain pytest in a subprocess, no sandbox) on the gold files."""
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp:
        for rel, text in {**task.workspace, **(task.solution or {})}.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *test_files], cwd=tmp,
                       capture_output=True, check=False,
                       env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        return time.perf_counter() - t0


def main(n: int) -> None:
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.tasks import registry
    from rlvr.tasks.domains import load_builtin
    from rlvr.tasks.domains.repo_real import STAMP
    from rlvr.tasks.spec import FinalState
    from rlvr.verify import VerifyContext, verify

    load_builtin()
    src = registry.make("repo-real")
    if not src.size:
        sys.exit("the repo-real pack is not built: run `make repo-real` first")
    stamp = json.loads((src.path / STAMP).read_text())
    report = stamp["report"]
    print(f"pack: {src.size} tasks from {len(report['projects'])} projects, built in {report['seconds']:.0f} s")
    tried: dict[str, int] = {}
    kept: dict[str, int] = {}
    for p in report["projects"]:
        print(f"  {p['name']} {p['version']}: tests {p['tests_found']} found / {p['tests_kept']} kept, "
              f"{p['seconds']:.0f} s, {sum(p['kept'].values())} tasks" + (f", skipped: {p['skipped']}" if p['skipped'] else ""))
        for g, c in p["tried"].items():
            tried[g] = tried.get(g, 0) + c
        for g, c in p["kept"].items():
            kept[g] = kept.get(g, 0) + c
    for g, count in tried.items():
        print(f"  generator {g}: {kept.get(g, 0)}/{count} candidates kept ({kept.get(g, 0) / count:.0%})")

    by_project: dict[str, list[int]] = {}
    for i in range(src.size):
        by_project.setdefault(src.id_at(i).split("-")[0], []).append(i)
    sample = [idx[(j * 7919) % len(idx)] for j in range(n) for idx in by_project.values()][:n * len(by_project)]
    sample = sorted(set(sample))[: max(n, 1)]
    verify_s, own_s, gold_ok, floor_ok = [], [], 0, 0
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        for i in sample:
            task = src.get(i)
            test_files = [t.removeprefix("hidden_tests/") for t in task.verifier["tests"]]
            t0 = time.perf_counter()
            gold = verify(task, FinalState(files={**task.workspace, **(task.solution or {})}), ctx)
            verify_s.append(time.perf_counter() - t0)
            own_s.append(own_command_s(task, test_files))
            gold_ok += gold.passed and gold.score == 1.0
            floor = verify(task, FinalState(files=dict(task.workspace)), ctx)
            floor_ok += floor.passed
    v50, o50 = statistics.median(verify_s), statistics.median(own_s)
    print(f"verification of one task: p50 {v50:.2f} s; the project's own test command on the same files: "
          f"p50 {o50:.2f} s; ratio {v50 / o50:.1f}x ({len(sample)} tasks)")
    print(f"gold solution (the final state the scripted gold policy submits) pass@1: {gold_ok}/{len(sample)} ({gold_ok / len(sample):.0%})")
    print(f"untouched-workspace baseline pass@1: {floor_ok}/{len(sample)} ({floor_ok / len(sample):.0%})")
    if gold_ok != len(sample):
        sys.exit("gold pass@1 is below 100 %")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
