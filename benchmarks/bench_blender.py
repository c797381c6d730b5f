"""One `blender` verification (run, save, render, compare) and its split, beside the `mesh` domain's, same
run.

1. p50 of one verification of a gold medium-tier scene with its reference already cached (the steady state of
   a run, where each task's reference is built once), split into: the candidate's run in Blender (start,
   script, save `.blend` and `.glb`), the inspection (open and measure, render two fixed cameras: a lit Cycles
   frame of `samples` samples and an id frame each) and the comparison here; plus the one-off cost of
   building a task's reference.
2. Verifications per second with two sandbox workers (two threads verifying distinct tasks) against one.
3. Baselines measured the same ways in the same run: the Blender pool without its warm interpreter (`warm=()`:
   each of the two commands starts Blender, as every verification did before the pool forked its jobs from an
   interpreter with `bpy` imported), and the `mesh` domain's verification (trimesh script in the sandbox,
   geometry checks).

Needs Blender (`make blender`); without it, prints how to get it and exits 0. Run alone:
`.venv/bin/python benchmarks/bench_blender.py [--reps 7] [--json]`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.progress import track

from rlvr.domains.blender.interpreter import MISSING_FIX, blender_python, make_blender_pool
from rlvr.sandbox import make_pool
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.verdict import Verdict


def p50(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def one(task: Task, final: FinalState, ctx: VerifyContext) -> Verdict:
    verdict = verify(task, final, ctx)
    if not verdict.passed or verdict.infra_error:
        raise SystemExit(f"gold of {task.key} did not pass: {verdict.infra_error or verdict.checks}")
    return verdict


def latency(task: Task, final: FinalState, ctx: VerifyContext, reps: int, label: str) -> tuple[list[float],
                                                                                              list[Verdict]]:
    walls, verdicts = [], []
    for _ in track(range(reps), description=label, transient=True):
        t0 = time.perf_counter()
        verdicts.append(one(task, final, ctx))
        walls.append(time.perf_counter() - t0)
    return walls, verdicts


def throughput(jobs: list[tuple[Task, FinalState]], ctx: VerifyContext, threads: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda job: one(job[0], job[1], ctx), jobs))
    return len(jobs) / (time.perf_counter() - t0)


def measure(name: str, tasks: list[Task], ctx: VerifyContext, reps: int,
            warm: Callable[[], None] = lambda: None) -> dict[str, Any]:
    src = registry.make(name)
    golds = [(t, src.gold(t)) for t in tasks]
    t0 = time.perf_counter()
    one(*golds[0], ctx)  # first verification of a task: for blender it also builds and caches the reference
    first = time.perf_counter() - t0
    for job in golds[1:]:
        one(*job, ctx)  # every reference cached before the timed runs
    walls, verdicts = latency(*golds[0], ctx, reps, f"{name}: latency")
    split = {k: p50([v.timings.get(k, 0.0) for v in verdicts])
             for k in ("run", "inspect", "inspect_measure", "inspect_render", "compare")}
    jobs = golds * 2
    return {"domain": name, "first_s": first, "p50_s": p50(walls), "split_s": split,
            "per_s_1": throughput(jobs, ctx, 1), "per_s_2": throughput(jobs, ctx, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if blender_python() is None:
        print(f"skipped: Blender is not installed; {MISSING_FIX}")
        return 0
    rows = []
    with make_blender_pool(workers=2) as bpool, make_blender_pool(workers=2, warm=()) as cold, \
            make_pool(workers=2) as pool:
        blender_tasks = registry.make("blender", tier="medium").sample(args.tasks)
        rows.append(measure("blender", blender_tasks,
                            VerifyContext(pool=pool, extras={"blender_pool": bpool}),
                            args.reps))
        rows.append(measure("blender", blender_tasks, VerifyContext(pool=pool, extras={"blender_pool": cold}),
                            args.reps) | {"domain": "blender (a Blender start per command)"})
        mesh_tasks = registry.make("mesh").sample(args.tasks)
        rows.append(measure("mesh", mesh_tasks, VerifyContext(pool=pool), args.reps))
    blender, started, mesh = rows
    out = {"rows": rows, "blender_over_mesh_p50": blender["p50_s"] / mesh["p50_s"],
           "cold_over_warm_p50": started["p50_s"] / blender["p50_s"],
           "blender_two_worker_speedup": blender["per_s_2"] / blender["per_s_1"],
           "mesh_two_worker_speedup": mesh["per_s_2"] / mesh["per_s_1"]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for r in rows:
        split = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in r["split_s"].items() if v)
        print(f"{r['domain']:40s} p50 {r['p50_s'] * 1000:7.0f} ms  first {r['first_s'] * 1000:7.0f} ms  "
              f"{r['per_s_1']:.2f}/s on 1 thread, {r['per_s_2']:.2f}/s on 2  [{split}]")
    print(f"a Blender start per command / warm pool, p50: {out['cold_over_warm_p50']:.2f}x; "
          f"blender / mesh p50: {out['blender_over_mesh_p50']:.1f}x; two workers: blender "
          f"{out['blender_two_worker_speedup']:.2f}x, mesh {out['mesh_two_worker_speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
