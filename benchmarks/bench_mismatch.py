"""The sampler/trainer mismatch on the real model: how far vLLM's log-probs of the tokens it samples are from
the trainer's (transformers, float32, the model the update differentiates), per engine dtype.

For each engine dtype (`float32`, `bfloat16`): start a vLLM engine on the real model, sample `--rows` chat
completions of `--new-tokens` tokens at temperature 1, score the same tokens with the trainer's forward pass,
and report max / mean |delta log-prob|, the mismatch KL estimate (mean of log p_engine - log p_trainer over
the sampled tokens, the k1 estimator of KL(engine || trainer)) and the quantiles of the token ratio
p_trainer / p_engine that truncated and masked importance sampling act on.

Runs in the vLLM venv: `.venv-vllm/bin/python benchmarks/bench_mismatch.py [--dtypes float32,bfloat16]`. The
model: `--model`, else `$RLVR_REAL_MODEL`, else `.rlvr-cache/smollm2-135m-instruct` (`make real-model`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

QUESTIONS = ("What is 17 + 25?", "Name three colours.", "Write a haiku about rivers.",
             "Explain recursion in one sentence.", "What is the capital of France?", "Count from 1 to 10.",
             "Give me a synonym for happy.", "Why is the sky blue?")


def measure(model_dir: str, dtype: str, rows: int, new_tokens: int) -> dict:
    import torch

    from rlvr.envs.messages import Message
    from rlvr.rollout.policies.vllm import VLLMPolicy
    from rlvr.rollout.policy import SamplingParams
    from rlvr.train.update import token_logprobs

    t0 = time.perf_counter()
    policy = VLLMPolicy(model_dir, dtype=dtype)
    start_s = time.perf_counter() - t0
    try:
        from transformers import AutoModelForCausalLM

        trainer = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        convs = [[Message(role="system", content="You are a helpful assistant."),
                  Message(role="user", content=QUESTIONS[i % len(QUESTIONS)])] for i in range(rows)]
        t1 = time.perf_counter()
        comps = policy.generate(convs, SamplingParams(temperature=1.0, max_new_tokens=new_tokens,
                                                      seeds=tuple(range(1, rows + 1))))
        gen_s = time.perf_counter() - t1
        deltas: list[float] = []  # log p_engine - log p_trainer per sampled token
        for c in comps:
            ids = torch.tensor([c.prompt_token_ids + c.token_ids])
            with torch.no_grad():
                ref = token_logprobs(trainer, ids, torch.ones_like(ids), 1.0)[0].tolist()
            deltas += [a - b for a, b in zip(c.logprobs, ref[len(c.prompt_token_ids):])]
    finally:
        policy.close()
    ratios = sorted(math.exp(-d) for d in deltas)
    q = statistics.quantiles(ratios, n=100)
    return {"dtype": dtype, "tokens": len(deltas), "max_abs": max(abs(d) for d in deltas),
            "mean_abs": sum(abs(d) for d in deltas) / len(deltas), "kl_k1": sum(deltas) / len(deltas),
            "ratio_p1": q[0], "ratio_p50": q[49], "ratio_p99": q[98], "ratio_min": ratios[0],
            "ratio_max": ratios[-1],
            "engine_start_s": round(start_s, 1), "generate_s": round(gen_s, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("RLVR_REAL_MODEL", ".rlvr-cache/smollm2-135m-instruct"))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.model, "config.json")):
        sys.exit(f"no model at {a.model}: run `make real-model` or pass --model")
    results = [measure(a.model, d, a.rows, a.new_tokens) for d in a.dtypes.split(",")]
    if a.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(), "results": results},
                         indent=1))
        return
    print("| engine dtype | tokens | max abs | mean abs | KL (k1) | ratio p1 / p50 / p99 | ratio min / max |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['dtype']} | {r['tokens']} | {r['max_abs']:.2e} | {r['mean_abs']:.2e} | "
              f"{r['kl_k1']:+.2e} | {r['ratio_p1']:.3f} / {r['ratio_p50']:.3f} / {r['ratio_p99']:.3f} | "
              f"{r['ratio_min']:.3f} / {r['ratio_max']:.3f} |")


if __name__ == "__main__":
    main()
