"""Weight sync per update: to one vLLM engine actor over the weight-sync group (`policy.engines = 1`) against the
in-process engine's `VLLMPolicy.sync_weights` of the same weights, measured in the same run.

For each model (the tests' tiny model, and `RLVR_REAL_MODEL` when it names a model directory) the trainer's
weights are nudged before every sync, as an update would, and both engines receive them: milliseconds per sync
(median of `--reps`, after one warm-up sync that also opens the group), the payload bytes, and the ratio
engines / in-process (lower is better). The engine actor runs on a new local Ray of 2 CPUs on this machine, so
the broadcast crosses a loopback socket between two processes; across nodes it crosses the network.

Run alone: `.venv-vllm/bin/python benchmarks/bench_weight_sync.py [--reps 5]`. From the main venv it re-runs itself
under .venv-vllm (built by `make test-vllm`), where vLLM and Ray are installed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _vllm_venv import reexec_in_vllm_venv

ROOT = Path(__file__).resolve().parents[1]


def nudge(model) -> None:
    """What an update does to the weights, as far as a sync can tell: every parameter changes."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-4)


def measure(model_dir: str, reps: int) -> dict[str, float]:
    from rlvr.rollout.vllm import VLLMPolicy
    from rlvr.rollout.vllm_fleet import EnginesPolicy

    t0 = time.perf_counter()
    engines = EnginesPolicy(model_dir, engines=1, device="cpu")
    start_s = time.perf_counter() - t0
    inproc = VLLMPolicy(model_dir, device="cpu")
    try:
        nudge(engines.model)
        t0 = time.perf_counter()
        engines.sync_weights()  # opens the group
        first_s = time.perf_counter() - t0
        inproc.sync_weights(engines.model)  # warm-up of the baseline
        remote, local = [], []
        for _ in range(reps):
            nudge(engines.model)
            engines.version += 1
            remote.append(engines.sync_weights())
            local.append(inproc.sync_weights(engines.model))
        params = sum(p.numel() for p in engines.model.parameters())
        return {"params": params, "bytes": engines.sync_bytes[-1], "start_s": start_s, "first_ms": 1e3 * first_s,
                "engines_ms": 1e3 * statistics.median(remote),
                "engine_side_ms": 1e3 * statistics.median(engines.engine_sync_seconds[1:]),
                "inproc_ms": 1e3 * statistics.median(local)}
    finally:
        engines.close()
        inproc.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="syncs measured per model (median reported)")
    args = ap.parse_args()
    reexec_in_vllm_venv(__file__, ("ray", "vllm"))
    import ray
    import torch

    from rlvr.rollout.builtin import build_tiny_model

    torch.set_num_threads(1)
    models = {"test model (tiny, 2x64)": str(build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", n_layer=2, n_embd=64,
                                                               n_head=2, n_positions=256, seed=7))}
    real = os.environ.get("RLVR_REAL_MODEL")
    if real and Path(real, "config.json").is_file():
        models[f"real model ({Path(real).name})"] = real
    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        rows = [(name, measure(path, args.reps)) for name, path in models.items()]
    finally:
        ray.shutdown()
    print(f"\n{'model':34s} {'params':>11s} {'bytes':>13s} {'engines ms':>11s} {'(engine side)':>13s} "
          f"{'in-process ms':>14s} {'ratio':>6s} {'first sync ms':>14s} {'start s':>8s}")
    for name, r in rows:
        print(f"{name:34s} {r['params']:11,d} {r['bytes']:13,d} {r['engines_ms']:11.1f} {r['engine_side_ms']:13.1f} "
              f"{r['inproc_ms']:14.1f} {r['engines_ms'] / r['inproc_ms']:6.2f} {r['first_ms']:14.1f} "
              f"{r['start_s']:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
