"""What RL teaches in the loop quickstart (`examples/loop-quickstart.toml`): the ablations, each over the same
seeds, with 95% intervals over seeds.

Arms, per seed (the seed draws the SFT tasks, the RL tasks and every sample; the model's initial weights are
the same):
- `loop`: the quickstart as it is: SFT on gold trajectories (recoveries included), then GRPO over whole
  episodes in which the env says what failed (`rollout.feedback = "cases"`).
- `blank`: the same with the feedback blanked everywhere, its gold trajectories included (the env says only
  "wrong"); evaluated in that env.
- `single`: single-turn RL on the same tasks (`rollout.max_turns = 1`: one answer an episode, judged by the
  hidden cases), with as many sampled answers as the `loop` arm of the seed generated (its batch scaled up);
  evaluated in the loop's env, like `loop`.
- `recovery`: the `loop` arm with recovery samples from its failed episodes (`sft.recovery_every`), or
  without them when the quickstart has them on: the effect of recovery samples, whichever way it comes out.

Each SFT start is trained once per seed and env (`loop`, `single` and `recovery` share theirs), then every
start and every arm's final model is evaluated the same way: the quickstart's 200 held-out tasks, 4 samples
each at temperature 1, with the same sampling seeds (`rlvr.commands.eval.run_eval`). Figures: episode pass@1
(the hidden verdict), first-attempt pass, recovery rate (attempt k passes after attempt k-1 failed) and
attempts used (`rlvr.monitor.evals.loop_summary`). Contrasts are paired by seed; an interval is the mean
difference over seeds +- t(0.975, n-1) x its standard error.

Results are kept per run under `runs/bench-loop/` (a finished run is not trained again: stop and restart at
any time) and summed up in `runs/bench-loop/results.json`. On the 2-core machine three seeds, one process each
(`--seeds 0`, `--seeds 1`, `--seeds 2` side by side, then `--seeds 0 1 2` to sum the cached runs up), took
about an hour for every arm. Run: `.venv/bin/python benchmarks/bench_loop.py [--seeds 0 1 2]
[--arms loop blank single recovery] [--steps N]`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "loop-quickstart.toml"
OUT = ROOT / "runs" / "bench-loop"
ARMS = ("loop", "blank", "single", "recovery")
FIGURES = ("pass_rate", "first_attempt_pass", "recovery_rate", "attempts")
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""The t distribution's 0.975 quantile by degrees of freedom (n seeds - 1)."""


def config(seed: int, name: str, overrides: list[str]) -> Any:
    from rlvr.config import load_config

    return load_config(CONFIG, [f"name={name}", f"seed={seed}", f"output_dir={OUT}", *overrides])


def trained(seed: int, name: str, overrides: list[str]) -> dict[str, Any]:
    """Train one run (or read the summary of a finished one); its summary with the wall time."""
    from rlvr import run

    summary = OUT / name / "summary.json"
    if summary.is_file():
        return json.loads(summary.read_text())
    t0 = time.perf_counter()
    out = run.train(config(seed, name, overrides), resume=False)
    print(f"  {name}: trained in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def evaluated(seed: int, name: str, model: Path, feedback: str) -> dict[str, Any]:
    """The held-out figures of `model` in the env with `feedback` (cached in `<name>/eval.json`)."""
    from rlvr.commands.eval import run_eval
    from rlvr.monitor.evals import write_report

    path = OUT / name / "eval.json"
    if path.is_file():
        return json.loads(path.read_text())
    cfg = config(seed, name, [f"rollout.feedback={feedback}"])
    t0 = time.perf_counter()
    rep = run_eval(f"hf:{model}", cfg.tasks.heldout or "", k=cfg.train.heldout_samples, seed=1_234_567,
                   config=cfg, show_progress=False, heldout=True)
    rep["wall_s"] = time.perf_counter() - t0
    write_report(rep, run_dir=path.parent)
    print(f"  {name}: evaluated in {rep['wall_s']:.0f} s", flush=True)
    return rep


def figures(rep: dict[str, Any]) -> dict[str, float]:
    """Episode pass@1 and the loop's figures of an eval report (the code domain's)."""
    row = rep["domains"]["code"]
    loop = row.get("loop") or {}
    return {"pass@1": row["pass@1"], **{k: loop[k] for k in FIGURES if k in loop}}


def turns_of(name: str) -> float:
    """Model turns (sampled answers) a finished run generated over its RL steps, from its metrics."""
    total = 0.0
    for line in (OUT / name / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line).get("metrics", {})
        if "train/episodes" in m and "episode/turns" in m:
            total += m["train/episodes"] * m["episode/turns"]
    return total


def one_seed(seed: int, arms: list[str], steps: int | None) -> dict[str, dict[str, Any]]:
    """Every arm of one seed: its start, its end, and the run's own summary."""
    from rlvr.config import load_config

    base = load_config(CONFIG)
    rl = [f"train.steps={steps}"] if steps is not None else []
    no_heldout = ['tasks.heldout=""']
    recovery_on = base.sft.recovery_every > 0
    out: dict[str, dict[str, Any]] = {}
    starts = {}
    for env in sorted({"blank" if a == "blank" else "cases" for a in arms}):
        name = f"s{seed}-sft-{env}"
        trained(seed, name, ["train.steps=0", *no_heldout, f"rollout.feedback={env}"])
        starts[env] = (OUT / name / "model", evaluated(seed, f"{name}-eval", OUT / name / "model", env))
    for arm in [a for a in ARMS if a in arms]:
        env = "blank" if arm == "blank" else "cases"
        model, before = starts[env]
        common = [f"policy.model={model}", "sft.enabled=false", *no_heldout, *rl, f"rollout.feedback={env}"]
        extra: list[str] = []
        if arm == "single":
            loop_name = f"s{seed}-loop"
            if not (OUT / loop_name / "metrics.jsonl").is_file():
                print(f"  {loop_name} not trained: single-turn skipped (its budget is the loop arm's)")
                continue
            cfg = load_config(CONFIG, rl)
            per_task = cfg.rollout.group_size * cfg.train.steps
            extra = ["rollout.max_turns=1", f"train.batch_size={math.ceil(turns_of(loop_name) / per_task)}"]
        if arm == "recovery":
            extra = ["sft.recovery_every=0" if recovery_on else "sft.recovery_every=5"]
        name = f"s{seed}-{arm}"
        summary = trained(seed, name, common + extra)
        after = evaluated(seed, f"{name}-eval", OUT / name / "model", env)
        out[arm] = {"before": figures(before), "after": figures(after), "wall_s": summary.get("wall_s"),
                    "overrides": extra}
    return out


def interval(diffs: list[float]) -> dict[str, Any]:
    """Mean of paired differences over seeds with its 95% t interval."""
    n = len(diffs)
    mean = statistics.fmean(diffs)
    if n < 2:
        return {"mean": mean, "ci": None, "n": n, "values": diffs}
    half = T975.get(n - 1, 1.96) * statistics.stdev(diffs) / math.sqrt(n)
    return {"mean": mean, "ci": [mean - half, mean + half], "n": n, "values": diffs}


def contrasts(results: dict[int, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The claims' figures over seeds: each arm's rise, the rise with feedback against blanked, single-turn
    against the loop, recovery samples against none."""
    seeds = sorted(results)

    def rises(arm: str, fig: str) -> dict[int, float]:
        return {s: results[s][arm]["after"][fig] - results[s][arm]["before"][fig] for s in seeds
                if arm in results[s] and fig in results[s][arm]["after"] and fig in results[s][arm]["before"]}

    def gap(a: str, b: str, fig: str) -> list[float]:
        return [results[s][a]["after"][fig] - results[s][b]["after"][fig] for s in seeds
                if a in results[s] and b in results[s]]

    out: dict[str, Any] = {}
    for arm in ARMS:
        for fig in ("pass@1", *FIGURES):
            if rises(arm, fig):
                out[f"{arm}: rise of {fig}"] = interval(list(rises(arm, fig).values()))
    fed, blank = rises("loop", "recovery_rate"), rises("blank", "recovery_rate")
    if set(fed) & set(blank):
        paired = [fed[s] - blank[s] for s in fed if s in blank]
        out["recovery rise, feedback minus blanked"] = interval(paired)
    for fig in ("pass@1", "first_attempt_pass", "recovery_rate"):
        if gap("loop", "single", fig):
            out[f"{fig} after RL, loop minus single-turn"] = interval(gap("loop", "single", fig))
        if gap("recovery", "loop", fig):
            out[f"{fig} after RL, recovery arm minus loop"] = interval(gap("recovery", "loop", fig))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("--steps", type=int, default=None,
                    help="RL steps of every arm (default: the quickstart's)")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for seed in args.seeds:
        print(f"seed {seed}: load average {os.getloadavg()[0]:.1f}", flush=True)
        results[seed] = one_seed(seed, args.arms, args.steps)
    summary = {"results": results, "contrasts": contrasts(results), "load_average_end": os.getloadavg()[0],
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (OUT / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    for seed, arms in results.items():
        for arm, r in arms.items():
            b, a = r["before"], r["after"]
            shown = (f"{k} {b.get(k, math.nan):.3f}->{a.get(k, math.nan):.3f}" for k in ("pass@1", *FIGURES))
            print(f"seed {seed} {arm:9s} " + "  ".join(shown))
    for name, c in summary["contrasts"].items():
        ci = f"[{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]" if c["ci"] else "(one seed)"
        print(f"{name}: {c['mean']:+.3f} {ci}  per seed {', '.join(f'{v:+.3f}' for v in c['values'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
