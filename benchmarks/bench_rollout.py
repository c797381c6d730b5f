"""Rollout throughput and policy idle fraction on multi-turn code tasks, beside a sequential baseline.

The engine (many episodes in flight, generation batched, tools and verification on worker threads) against
the same engine run one episode at a time with one tool thread (no overlap), in the same run, for:

1. `scripted`: replayed actions (list_files, read_file, run_tests, write_file, run_tests, submit); generation
   is free, so the figure is the tool and verification path alone.
2. `hf-paced`: the same actions, but every turn first generates `--new-tokens` tokens with the built-in tiny
   model (batched, KV cache) and then takes the scripted action: the generation cost of a real policy with
   tool calls a random-weight model cannot make.

Run alone: `.venv/bin/python benchmarks/bench_rollout.py [--isolation none] [--tasks 8] [--group 2]`.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Sequence

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rlvr.config import RolloutConfig
from rlvr.envs.messages import Message
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies.scripted import Script, ScriptedPolicy
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.sandbox import make_pool
from rlvr.tasks.selection import resolve

STUB = "def solve(*args):\n    return None\n"


def call(name: str, **args: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


SCRIPT = Script.model_validate({"default": [
    call("list_files"), call("read_file", path="solution.py"), call("run_tests"),
    call("write_file", path="notes.txt", content=STUB), call("run_tests"), call("submit")]})


class Paced:
    """Generates real tokens with an hf policy, then answers with the scripted action of the turn."""

    def __init__(self, hf, script: ScriptedPolicy) -> None:
        self.hf, self.script, self.version = hf, script, 0

    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams,
                 **kw) -> list[Completion]:
        # the tiny model's 512-token window cannot hold a code task: keep the latest tokens of each prompt
        keep = self.hf.max_context - params.max_new_tokens
        prompts = [self.hf.encode(self.hf.render(c))[-keep:] for c in conversations]
        self.hf.generate(conversations, SamplingParams(temperature=1.0, max_new_tokens=params.max_new_tokens,
                                                       seeds=params.seeds), prompt_token_ids=prompts)
        return self.script.generate(conversations, SamplingParams(max_new_tokens=10_000))


def measure(policy, pool, tasks, group: int, overlap: bool, new_tokens: int, bar: Progress, label: str
            ) -> dict[str, float]:
    cfg = RolloutConfig(concurrency=64 if overlap else 1, tool_workers=2 if overlap else 1,
                        max_tokens=100_000)
    job = bar.add_task(label, total=len(tasks) * group)
    eng = EnvRollouts(policy, pool, config=cfg, sampling=SamplingParams(max_new_tokens=new_tokens),
                        progress=lambda done, total: bar.update(job, completed=done))
    t0 = time.perf_counter()
    eps = eng.run(tasks, group, seed=0)
    wall = time.perf_counter() - t0
    bad = sum(e.status == "infra_error" for e in eps)
    return {"episodes": len(eps), "wall_s": wall, "episodes_per_s": len(eps) / wall,
            "idle_fraction": eng.stats.idle_fraction, "turns": sum(e.num_turns for e in eps) / len(eps),
            "infra_errors": bad}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isolation", default="bwrap", choices=["bwrap", "none"])
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    tasks = resolve(f"code:{args.tasks}", seed=0)
    from rlvr.rollout.policies.hf import HFPolicy

    policies = {"scripted": ScriptedPolicy(SCRIPT),
                "hf-paced": Paced(HFPolicy("builtin:tiny", device="cpu"), ScriptedPolicy(SCRIPT))}
    results: dict[str, dict[str, dict[str, float]]] = {}
    with make_pool(isolation=args.isolation, workers=2) as pool, \
            Progress(TextColumn("{task.description:24s}"), BarColumn(), MofNCompleteColumn(),
                     TimeElapsedColumn(),
                     console=Console(stderr=True), transient=True) as bar:
        measure(policies["scripted"], pool, tasks[:1], 1, True, args.new_tokens, bar, "warm-up")
        for name, policy in policies.items():
            new = args.new_tokens if name == "hf-paced" else 10_000  # a script is never cut
            results[name] = {}
            for mode in ("sequential", "engine"):
                results[name][mode] = measure(policy, pool, tasks, args.group, mode == "engine", new, bar,
                                              f"{name} {mode}")
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.tasks} multi-turn code tasks x {args.group} samples, isolation={args.isolation}")
    for name, r in results.items():
        s, e = r["sequential"], r["engine"]
        print(f"{name:9s} sequential {s['episodes_per_s']:6.2f} ep/s idle {s['idle_fraction']:.2f} | "
              f"engine {e['episodes_per_s']:6.2f} ep/s idle {e['idle_fraction']:.2f} | "
              f"speed-up {e['episodes_per_s'] / s['episodes_per_s']:.2f}x | turns/ep {e['turns']:.1f} | "
              f"infra errors {s['infra_errors'] + e['infra_errors']}")


if __name__ == "__main__":
    main()
