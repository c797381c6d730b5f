"""Asynchronous against synchronous training, in one run: the real loop (`rlvr.run.train`), same model,
tasks, seed and budgets, once with `train.max_staleness = 0` and once with 1; the bwrap sandbox verifies.

Reports seconds per GRPO step (median over the measured steps, from each step's phase timings), the trainer's
wait for rollouts per step (`time/rollout_s`: all of the rollout when synchronous, only what the update did
not hide when asynchronous), and the ratio async / sync (lower is better).

`python benchmarks/bench_async.py [--backend hf|vllm] [--steps 8] [--tasks 8] [--group 8]`; with
`--backend vllm` it re-runs itself under .venv-vllm (built by `make test-vllm`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _vllm_venv import reexec_in_vllm_venv

ROOT = Path(__file__).resolve().parents[1]


def _config(out: Path, name: str, args: argparse.Namespace, staleness: int):
    from rlvr.config import RunConfig

    return RunConfig.model_validate({
        "name": name, "output_dir": str(out), "seed": 0,
        "tasks": {"train": "code", "heldout": ""},
        "policy": {"backend": args.backend, "model": args.model, "max_new_tokens": 48},
        "rollout": {"group_size": args.group},
        "train": {"steps": args.steps, "batch_size": args.tasks, "lr": 1e-4, "checkpoint_every": 1000,
                  "max_staleness": staleness},
        "sft": {"enabled": True, "steps": args.sft_steps},
        "schedule": {"skip_zero_variance": False},  # every step updates, even with a weak model
        "monitor": {"tensorboard": False, "report": False, "detectors": False},
    })


def _steps(run_dir: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["metrics"] for r in rows if "time/update_s" in r["metrics"]]


def measure(args: argparse.Namespace, staleness: int, out: Path) -> dict[str, float]:
    from rlvr import run

    cfg = _config(out, f"staleness{staleness}", args, staleness)
    t0 = time.perf_counter()
    run.train(cfg, resume=False)
    wall = time.perf_counter() - t0
    steps = _steps(cfg.run_dir)[1:]  # the first step has no update to overlap with
    per_step = [sum(v for k, v in m.items() if k.startswith("time/")) for m in steps]
    return {"step_s": statistics.median(per_step),
            "wait_s": statistics.median(m["time/rollout_s"] for m in steps),
            "update_s": statistics.median(m["time/update_s"] for m in steps), "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("hf", "vllm"), default="hf")
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--sft-steps", type=int, default=150,
                    help="SFT warm start, so that answers are worth verifying")
    args = ap.parse_args()
    if args.backend == "vllm":
        reexec_in_vllm_venv(__file__)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"load average before: {os.getloadavg()[0]:.2f}; backend {args.backend}, {args.steps} steps of "
          f"{args.tasks} tasks x {args.group} samples (code, tiny tier)", flush=True)
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-async-") as tmp:
        res = {k: measure(args, k, Path(tmp)) for k in (0, 1)}
    for k, r in res.items():
        label = "synchronous " if k == 0 else "async (k=1) "
        print(f"{label} step {r['step_s']:6.2f}s  waiting for rollouts {r['wait_s']:6.2f}s  "
              f"update {r['update_s']:5.2f}s  run {r['wall_s']:6.1f}s", flush=True)
    print(f"ratio async / sync: step time x{res[1]['step_s'] / res[0]['step_s']:.2f}, "
          f"whole run x{res[1]['wall_s'] / res[0]['wall_s']:.2f}; load average after: "
          f"{os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
