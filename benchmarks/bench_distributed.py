"""Training on 2 ranks against 1 (rlvr.train.distributed): samples per second of RL steps, and the parameter +
optimizer-state bytes each rank holds (FSDP2 shards them), same config, tasks and model, one thread per rank.

Baseline: the same run as one process (`rlvr train`, world size 1), measured in the same invocation. Samples
per second count the episodes of the RL steps over the steps' own wall time (the `time/*_s` phases rank 0
logs), so process start-up and held-out evaluation are left out on both sides. The toy domain gives a graded
reward a random model earns (the share of characters with an even code point), so every step updates.

    python benchmarks/bench_distributed.py            # about 3 minutes on 2 cores (the builtin tiny model)
    python benchmarks/bench_distributed.py --n-layer 4 --n-embd 256    # a model whose work is its matmuls
Run as a rank (`torchrun ... benchmarks/bench_distributed.py CONFIG`) it registers the toy domain and trains.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOY = "bench_dist_toy"
STEPS = 6


def register_toy() -> None:
    from rlvr.tasks import registry
    from rlvr.tasks.domain import Domain, VerifierKind
    from rlvr.tasks.source import ListSource
    from rlvr.tasks.spec import Task, TaskLimits
    from rlvr.verify.verdict import Check, Verdict

    class Even:
        def verify(self, task, final):
            text = final.answer or ""
            score = sum(ord(c) % 2 == 0 for c in text) / max(1, len(text))
            return Verdict.from_checks([Check(name="even", score=score, passed=score > 0.7)])

    def source(cfg: object) -> ListSource:
        return ListSource([Task(id=f"t{i}", domain=TOY, prompt=f"write something {i}",
                                limits=TaskLimits(max_tokens=48)) for i in range(256)], name=TOY)

    registry.names()
    registry.register(Domain(TOY, source, verifiers={TOY: VerifierKind(lambda ctx: Even())}))


def config(out: Path, model: Path, world: int, sharding: str = "fsdp") -> dict:
    return {
        "name": f"w{world}", "output_dir": str(out), "seed": 1,
        "tasks": {"train": f"{TOY}:256", "heldout": ""},
        "sandbox": {"isolation": "none", "workers": 1},
        "policy": {"model": str(model), "max_new_tokens": 48, "device": "cpu"},
        "rollout": {"group_size": 8, "tool_workers": 1},
        "train": {"steps": STEPS, "batch_size": 8, "lr": 1e-4, "checkpoint_every": 100,
                  "micro_batch_size": 32,
                  **({"world_size": world, "sharding": sharding} if world > 1 else {})},
        "sft": {"enabled": False},
        "monitor": {"tensorboard": False, "report": False},
    }


def launch(cfg_path: Path, world: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world)]
           if world > 1 else [sys.executable])
    t0 = time.perf_counter()
    subprocess.run([*cmd, __file__, str(cfg_path)], check=True, env=env, cwd=ROOT, capture_output=True)
    return time.perf_counter() - t0


def measure(run_dir: Path) -> tuple[float, dict]:
    """(samples/s over the RL steps' own wall time, summary)."""
    from rlvr.monitor.monitor import read_metrics
    from rlvr.store.layout import RunLayout

    metrics = [m for m in read_metrics(RunLayout(run_dir).metrics).values() if "time/rollout_s" in m]
    walls = [sum(v for k, v in m.items() if k.startswith("time/")) for m in metrics]
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["phases"] = {k: round(sum(m.get(f"time/{k}_s", 0.0) for m in metrics), 2)
                         for k in ("sample", "rollout", "update", "record")}
    return STEPS * 8 * 8 / sum(walls), summary


def main() -> None:
    from rlvr.rollout.policies.builtin import BUILTIN_MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-layer", type=int, default=BUILTIN_MODELS["tiny"]["n_layer"])
    ap.add_argument("--n-embd", type=int, default=BUILTIN_MODELS["tiny"]["n_embd"],
                    help="width of the GPT-2 (default: the quickstart's builtin tiny, 0.9M parameters)")
    ap.add_argument("--sharding", choices=("fsdp", "ddp"), default="fsdp",
                    help="train.sharding of the 2-rank runs")
    args = ap.parse_args()
    # 4 runs' checkpoints: gigabytes for a 19M model
    with tempfile.TemporaryDirectory(prefix="bench-dist-") as tmp:
        run(args, Path(tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    import tomli_w

    from rlvr.rollout.policies.builtin import BUILTIN_MODELS, build_tiny_model

    size = {**BUILTIN_MODELS["tiny"], "n_layer": args.n_layer, "n_embd": args.n_embd}
    model = build_tiny_model(tmp / "model", seed=3, **size)
    rows = {}
    for world in (1, 2, 1, 2):  # alternated, twice: the machine is shared
        path = tmp / f"w{world}.toml"
        path.write_text(tomli_w.dumps(config(tmp / f"out{len(rows)}", model, world, args.sharding)))
        wall = launch(path, world)
        sps, summary = measure(tmp / f"out{len(rows)}" / f"w{world}")
        rows[len(rows)] = (world, sps, wall, summary)
    by = {w: [r for r in rows.values() if r[0] == w] for w in (1, 2)}
    sps1 = statistics.median(r[1] for r in by[1])
    sps2 = statistics.median(r[1] for r in by[2])
    mem1 = by[1][0][3]["rank_state_bytes"][0]
    mem2 = max(by[2][0][3]["rank_state_bytes"])
    print(f"model: GPT-2 {args.n_layer} x {args.n_embd}, {by[1][0][3]['model_params']:,} "
          f"parameters; 2 ranks: {args.sharding}; {STEPS} steps of 8 tasks x 8 samples, "
          "48 new tokens; one thread per rank")
    for w, rs in by.items():
        print(f"{w} rank(s): samples/s {', '.join(f'{r[1]:.1f}' for r in rs)}; process wall "
              f"{', '.join(f'{r[2]:.1f}' for r in rs)} s; param+optimizer bytes per rank "
              f"{rs[0][3]['rank_state_bytes']}; step phases (s, rank 0) "
              f"{'; '.join(str(r[3]['phases']) for r in rs)}")
    print(f"samples/s ratio (2 ranks / 1): {sps2 / sps1:.2f}x   (goal >= 1.6x)")
    print(f"per-rank param+optimizer memory (2 ranks / 1): {mem2 / mem1:.2f}x   (goal <= 0.6x)")


if __name__ == "__main__":
    # one rank (or the single process) of a measured run
    if len(sys.argv) > 1 and sys.argv[1].endswith(".toml"):
        import torch

        torch.set_num_threads(1)
        register_toy()
        from rlvr.cli import main as cli

        sys.exit(cli(["train", sys.argv[1]]))
    main()
