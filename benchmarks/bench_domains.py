"""Verification cost of the answer and artefact domains beside a naive verifier of the same answers, same run;
and the cost of the domains that run in their own images (c, sql, shell).

For each answer domain, the gold final states of a fixed sample of tasks are verified by rlvr's verifier and
by a baseline that a naive reward function would use:

- math, reasoning-gym: exact string comparison of the `<answer>` text (no equivalence, no leniency audit);
- config, rules, extraction: `json.loads` of the answer and `==` with the reference document;
- mesh: running the gold script in the same sandbox pool without any checks (the candidate's own cost).

For each image domain and tier (`bench_images_domains`): one verification of each gold final state, p50 and
p99, beside the candidate's own visible check in the same image (c: `make test`, the visible tests under the
sanitizers; sql: `psql -f` of the reference, a server started and seeded; shell: unpacking its tree); the wall
time of a gold episode played at a terminal by the scripted gold policy; and a PostgreSQL server started from
the image's template cluster (how every sql job starts one) beside a fresh `initdb` and start, in one job.
It needs the images (`make images`); without podman it says so in a line and measures the rest.

Run alone: `.venv/bin/python benchmarks/bench_domains.py [--tasks 20] [--per-tier 6] [--json]`.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from _image_domains import bench_images_domains, print_images
from rich.progress import track

from rlvr.sandbox import make_pool
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, make_verifier

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _exact(task: Task, final: FinalState) -> bool:
    m = ANSWER.search(final.answer or "")
    return bool(m) and m.group(1).strip() == str(task.answer).strip()


def _json_equal(task: Task, final: FinalState) -> bool:
    m = ANSWER.search(final.answer or "")
    return bool(m) and json.loads(m.group(1)) == json.loads(str(task.answer))


def _median_ms(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def bench(domain: str, n: int, baseline: Callable[[Task, FinalState], Any], ctx: VerifyContext,
          reps: int = 3) -> dict[str, Any]:
    """Median ms of rlvr's verifier (first verification of each gold) and of the naive baseline."""
    src = registry.make(domain)
    verifier = make_verifier(registry.verifier_kind(domain), ctx)
    warm = src.sample(3, offset=1000) if src.size is None else src.sample(3, seed=1)
    for t in warm:  # start the guard process and load the libraries outside the measurement
        verifier.verify(t, src.gold(t))
    tasks = src.sample(n)
    golds = [src.gold(t) for t in tasks]
    ours, base = [], []
    for t, g in zip(tasks, golds):  # first verification of each answer: no result caches help
        t0 = time.perf_counter()
        verdict = verifier.verify(t, g)
        ours.append((time.perf_counter() - t0) * 1000)
        assert verdict.score == 1.0, (domain, t.id)
        base.append(_median_ms(lambda t=t, g=g: baseline(t, g), reps))
    o, b = statistics.median(ours), statistics.median(base)
    return {"domain": domain, "tasks": n, "rlvr_ms": round(o, 3), "baseline_ms": round(b, 4),
            "ratio": round(o / b, 1) if b else None}


def _mesh_baseline(pool: Any) -> Callable[[Task, FinalState], Any]:
    def run(task: Task, final: FinalState) -> Any:
        return pool.run(["python", "solution.py"], files={"solution.py": str(task.answer)})
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="tasks per answer domain")
    parser.add_argument("--per-tier", type=int, default=6, help="tasks per tier of each image domain")
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    args = parser.parse_args()
    rows = []
    plan: list[tuple[str, int, Callable[[Task, FinalState], Any]]] = [
        ("math", args.tasks, _exact), ("rg-basic_arithmetic", args.tasks, _exact),
        ("rg-countdown", args.tasks, _exact),
        ("config", args.tasks, _json_equal), ("rules", args.tasks, _json_equal),
        ("extraction", args.tasks, _json_equal),
    ]
    for domain, n, baseline in track(plan, description="answer domains", disable=args.json):
        rows.append(bench(domain, n, baseline, VerifyContext()))
    with make_pool(workers=1) as pool:
        rows.append(bench("mesh", max(2, args.tasks // 10), _mesh_baseline(pool), VerifyContext(pool=pool),
                          reps=1))
    images = bench_images_domains(args.per_tier, quiet=args.json)
    if args.json:
        print(json.dumps(rows + images))
        return
    print_images(images)
    print(f"{'domain':22} {'tasks':>5} {'rlvr ms':>10} {'baseline ms':>12} {'ratio':>8}")
    for r in rows:
        print(f"{r['domain']:22} {r['tasks']:>5} {r['rlvr_ms']:>10.2f} {r['baseline_ms']:>12.4f} "
              f"{r['ratio']!s:>8}")


if __name__ == "__main__":
    main()
