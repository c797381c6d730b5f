"""Task generation speed of the code domains (`code` per tier, `humaneval`, `repo`) beside a baseline.

The baseline, measured in the same run on the same tasks, is validating the finished Task records again
(`Task.model_validate` of their dumps): the floor cost of producing the record at all, whatever the generator.
The ratio says how much the generator adds on top of building the record.

Run alone: `.venv/bin/python benchmarks/bench_code_tasks.py [--n 500] [--json]`.
"""
from __future__ import annotations

import argparse
import json
import time

from rich.console import Console
from rich.table import Table

from rlvr.domains.humaneval import source as humaneval
from rlvr.tasks import registry
from rlvr.tasks.spec import Task

SOURCES = {
    "code tiny": ("code", {"tier": "tiny"}), "code easy": ("code", {"tier": "easy"}),
    "code medium": ("code", {"tier": "medium"}), "code hard": ("code", {"tier": "hard"}),
    "humaneval": ("humaneval", {}), "repo": ("repo", {}),
}


def _best_of(fn, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _generate(domain: str, cfg: dict, idx: list[int]) -> list[Task]:
    """Build the tasks cold: a fresh source, and no task kept from an earlier call."""
    humaneval._task.cache_clear()
    src = registry.make(domain, **cfg)
    return [src.get(i) for i in idx]


def measure(n: int) -> dict[str, dict[str, float]]:
    out = {}
    for label, (domain, cfg) in SOURCES.items():
        src = registry.make(domain, **cfg)
        idx = list(range(n if src.size is None else min(n, src.size)))
        dumps = [t.model_dump() for t in _generate(domain, cfg, idx)]  # also warms the package's data files
        gen = _best_of(lambda d=domain, c=cfg, i=idx: _generate(d, c, i))
        base = _best_of(lambda d=dumps: [Task.model_validate(x) for x in d])
        out[label] = {"tasks_per_s": len(idx) / gen, "baseline_per_s": len(idx) / base, "ratio": gen / base}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500,
                    help="tasks generated per source (repo and humaneval: at most all)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    res = measure(args.n)
    if args.json:
        print(json.dumps(res))
        return
    table = Table("source", "tasks/s", "baseline: record validation/s", "generation cost / baseline")
    for label, r in res.items():
        table.add_row(label, f"{r['tasks_per_s']:,.0f}", f"{r['baseline_per_s']:,.0f}", f"{r['ratio']:.1f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
