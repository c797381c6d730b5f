"""The vLLM rollout engine against the local `hf` backend on the same model, tasks and sampling, in one run.

Measures, for each backend: engine start-up, generation throughput (tokens/s over one batch of task prompts,
`--new-tokens` at most each; a random-weight model rarely ends a turn early), and seconds per GRPO step
(rollout of `--tasks` x `--group` episodes, verification, an AdamW update of the trainer's weights and, for
vLLM, the weight sync into the engine); and the weight-sync time per step. Ratios are vLLM / hf (throughput:
higher is better; step time: lower is better).

Run alone: `.venv-vllm/bin/python benchmarks/bench_vllm.py [--model builtin:tiny] [--tasks 8] [--group 4]`.
From the main venv it re-runs itself under .venv-vllm (built by `make test-vllm`), where vLLM is installed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from _vllm_venv import reexec_in_vllm_venv

ROOT = Path(__file__).resolve().parents[1]


def build(backend: str, model: str, max_context: int):
    from rlvr.rollout.policies.hf import HFPolicy
    from rlvr.rollout.policies.vllm import VLLMPolicy

    t0 = time.perf_counter()
    policy = HFPolicy(model, device="cpu", threads=1) if backend == "hf" else VLLMPolicy(model, device="cpu")
    return policy, time.perf_counter() - t0


def throughput(policy, prompts: list[list[int]], new_tokens: int) -> tuple[float, int]:
    from rlvr.envs.messages import Message
    from rlvr.rollout.policy import SamplingParams

    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seeds=tuple(range(len(prompts))))
    convs = [[Message(role="user", content="")] for _ in prompts]
    # warm-up
    policy.generate(convs[:2], SamplingParams(max_new_tokens=4, seeds=(0, 1)), prompt_token_ids=prompts[:2])
    t0 = time.perf_counter()
    comps = policy.generate(convs, params, prompt_token_ids=prompts)
    dt = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for c in comps)
    return tokens / dt, tokens


def grpo_steps(policy, tasks, group: int, steps: int, new_tokens: int) -> dict[str, float]:
    from rlvr.config import RolloutConfig, TrainConfig
    from rlvr.rollout.core.runner import EnvRollouts
    from rlvr.rollout.policy import SamplingParams
    from rlvr.sandbox.unsafe import UnsafePool
    from rlvr.train.advantages import episode_advantages
    from rlvr.train.update import PolicyUpdater, samples_from

    pool = UnsafePool(warn=False)
    engine = EnvRollouts(policy, pool, config=RolloutConfig(tool_workers=2),
                           sampling=SamplingParams(temperature=1.0, max_new_tokens=new_tokens))
    updater = PolicyUpdater(policy.model, TrainConfig(lr=1e-4), pad_id=policy.pad_id, temperature=1.0)
    times, rollouts, syncs, tokens = [], [], [], 0
    try:
        for step in range(steps):
            t0 = time.perf_counter()
            eps = engine.run(tasks, group, step=step, seed=step)
            rollouts.append(time.perf_counter() - t0)
            adv = episode_advantages(eps, "grpo")
            # a random model rarely earns a reward: a fixed +-1 split keeps the update a real gradient step
            adv = {ep.episode_id: adv.get(ep.episode_id) or (1.0 if i % 2 else -1.0) for i,
                   ep in enumerate(eps)}
            updater.step(samples_from(eps, adv), seed=step)
            policy.version += 1
            if hasattr(policy, "sync_weights"):
                syncs.append(policy.sync_weights())
            times.append(time.perf_counter() - t0)
            tokens += engine.stats.generated_tokens
    finally:
        pool.close()
    return {"step_s": statistics.median(times), "rollout_s": statistics.median(rollouts),
            "sync_s": statistics.median(syncs) if syncs else 0.0, "tokens_per_step": tokens / steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--tasks", type=int, default=8, help="math tasks per GRPO step")
    ap.add_argument("--group", type=int, default=4, help="episodes per task")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps measured (median reported)")
    ap.add_argument("--batch", type=int, default=64, help="prompts in the throughput batch")
    ap.add_argument("--new-tokens", type=int, default=128)
    args = ap.parse_args()
    reexec_in_vllm_venv(__file__)
    import torch

    from rlvr.tasks.selection import resolve

    torch.set_num_threads(1)
    tasks = resolve(f"math:{args.tasks}", seed=0)
    results: dict[str, dict[str, float]] = {}
    for backend in ("hf", "vllm"):
        policy, start_s = build(backend, args.model, 512)
        prompts = [policy.encode(policy.render([_user(t.prompt)]))[-(policy.max_context - args.new_tokens):]
                   for t in (tasks * (args.batch // len(tasks) + 1))[:args.batch]]
        tps, n = throughput(policy, prompts, args.new_tokens)
        step = grpo_steps(policy, tasks, args.group, args.steps, min(args.new_tokens, 32))
        results[backend] = {"start_s": start_s, "tok_per_s": tps, **step}
        print(f"{backend:5s} start {start_s:6.1f}s  generate {tps:8.0f} tok/s ({n} tokens)  "
              f"GRPO step {step['step_s']:6.2f}s (rollout {step['rollout_s']:.2f}s, "
              f"{step['tokens_per_step']:.0f} tokens)  weight sync {1000 * step['sync_s']:7.1f} ms",
              flush=True)
        if hasattr(policy, "close"):
            policy.close()
        del policy
    hf, vl = results["hf"], results["vllm"]
    print(f"ratio vllm/hf: generate tok/s x{vl['tok_per_s'] / hf['tok_per_s']:.2f}, "
          f"GRPO step time x{vl['step_s'] / hf['step_s']:.2f}, start-up "
          f"x{vl['start_s'] / hf['start_s']:.1f}; weight sync = {100 * vl['sync_s'] / vl['step_s']:.1f}% of "
          f"a vLLM step")
    return 0


def _user(text: str):
    from rlvr.envs.messages import Message

    return Message(role="user", content=text)


if __name__ == "__main__":
    sys.exit(main())
