"""Run every benchmark (benchmarks/bench_*.py) in turn: `make bench` or `python benchmarks/run.py [NAME ...]`.

Each benchmark measures its own baseline in the same run and prints ratios; this runner only sequences them
(never in parallel: they share two cores) and stops nothing on a failure.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    wanted = set(argv)
    benches = sorted(p for p in HERE.glob("bench_*.py") if not wanted
                     or p.stem.removeprefix("bench_") in wanted)
    failed = []
    for path in benches:
        print(f"\n=== {path.stem} ===", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(path)], cwd=HERE.parent)
        print(f"--- {path.stem}: exit {rc} in {time.perf_counter() - t0:.1f}s", flush=True)
        if rc != 0:
            failed.append(path.stem)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
