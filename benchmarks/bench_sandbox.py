"""Sandbox latency, pytest throughput, parallel throughput, recovery and hygiene, each beside its baseline.

1. A trivial Python job (`python -c pass`) through the warm isolated pool, request to result, against
   `subprocess.run([sys.executable, "-c", "pass"])` with no isolation at all.
2. A small pytest verification (5 tests) in the sandbox against `python -m pytest` in a fresh subprocess.
3. Trivial jobs from 2 threads on a 2-worker pool against 2 threads of plain subprocesses.
4. Recovery: from SIGKILL of the serving worker to the next job's result, against a cold worker start.
5. Hygiene: N mixed jobs (timeouts, fork bombs, crashes, daemons, background shells, a worker killed every
   500 jobs); then leftover sandbox processes, mounts, cgroups and temporary directories are counted.

Run alone: `.venv/bin/python benchmarks/bench_sandbox.py [--jobs 200] [--hygiene 10000] [--json]`.
"""
from __future__ import annotations

import argparse
import json
import time

from rich.console import Console
from rich.progress import Progress

from rlvr.sandbox.bench import figures_table, run_bench, run_hygiene


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200, help="trivial jobs timed (other samples scale with it)")
    ap.add_argument("--hygiene", type=int, default=10_000, help="jobs of the hygiene run (0: skip)")
    ap.add_argument("--json", action="store_true", help="print one flat JSON object")
    args = ap.parse_args()
    console = Console(stderr=True)
    n = args.jobs
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("latency and throughput", total=n + n // 4 + n // 10 + n // 40)
        figures: dict[str, float] = run_bench(n, progress=lambda: progress.advance(task))
        if args.hygiene:
            task = progress.add_task(f"hygiene ({args.hygiene} hostile jobs)", total=args.hygiene)
            t0 = time.perf_counter()
            figures |= run_hygiene(args.hygiene, progress=lambda: progress.advance(task))
            figures["hygiene_s"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps({k: round(v, 3) for k, v in figures.items()}))
        return
    Console().print(figures_table(figures))
    if args.hygiene:
        left = {k: int(v) for k, v in figures.items() if k.startswith("leftover_")}
        Console().print(f"hygiene after {args.hygiene} jobs in {figures['hygiene_s']:.0f} s: {left}")


if __name__ == "__main__":
    main()
