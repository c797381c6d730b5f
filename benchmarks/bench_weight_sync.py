"""Weight sync per update to one vLLM engine actor (`[policy] engines = 1`): LoRA adapters against the full
weights, and the full weights with frozen embeddings, measured in the same run on the same engine.

For each model (a tiny Llama built from its config, and `RLVR_REAL_MODEL` when it names a model directory) one
engine actor starts with vLLM's LoRA support (`lora_rank`), then, every sync preceded by a nudge of what an
update would change:
- full: every weight changes, every weight is sent (what a full fine-tuning run sends);
- frozen embeddings: the embeddings (tied to the output head) have `requires_grad` off; after the first sync
  they are fingerprinted and skipped;
- LoRA: the model is wrapped with peft adapters (rank `--rank` on every linear layer, as `train.lora`); only
  the adapters change and only they are sent, loaded by the engine as a vLLM LoRA adapter.
Milliseconds per sync (median of `--reps`, after one warm-up sync of each kind), payload bytes, and the ratios
full / LoRA (higher is better). The engine runs on a new local Ray of 2 CPUs on this machine, so the broadcast
crosses a loopback socket between two processes; across nodes it crosses the network.

`--inprocess`: instead, the full weights to the engine actor against the in-process engine's
`VLLMPolicy.sync_weights` of the same weights (the earlier comparison).

Run alone: `.venv-vllm/bin/python benchmarks/bench_weight_sync.py [--reps 5] [--json]`. From the main venv it
re-runs itself under .venv-vllm (built by `make test-vllm`), where vLLM, Ray and peft are installed.
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


def nudge(model, only: str | None = None) -> None:
    """What an update does to the weights, as far as a sync can tell: every trainable parameter (whose name
    holds `only`, when given) changes."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and (only is None or only in name):
                p.add_(torch.randn_like(p) * 1e-4)


def timed_syncs(policy, reps: int, only: str | None = None) -> tuple[float, int, float]:
    """(median ms, bytes of the last, median engine-side ms) of `reps` syncs after one warm-up."""
    seconds = []
    for i in range(reps + 1):
        nudge(policy.model, only)
        policy.version += 1
        dt = policy.sync_weights()
        if i:
            seconds.append(dt)
    return (1e3 * statistics.median(seconds), policy.sync_bytes[-1],
            1e3 * statistics.median(policy.engine_sync_seconds[-reps:]))


def measure(model_dir: str, reps: int, rank: int) -> dict[str, float]:
    from peft import LoraConfig, get_peft_model

    from rlvr.rollout.fleet.engines import EnginesPolicy

    t0 = time.perf_counter()
    pol = EnginesPolicy(model_dir, engines=1, device="cpu", lora_rank=rank)
    out: dict[str, float] = {"start_s": time.perf_counter() - t0}
    try:
        out["params"] = sum(p.numel() for p in pol.model.parameters())
        t0 = time.perf_counter()
        pol.sync_weights()  # opens the group
        out["first_ms"] = 1e3 * (time.perf_counter() - t0)
        out["full_ms"], out["full_bytes"], out["full_engine_ms"] = timed_syncs(pol, reps)
        embed = pol.model.get_input_embeddings().weight
        embed.requires_grad_(False)
        out["frozen_ms"], out["frozen_bytes"], _ = timed_syncs(pol, reps)
        embed.requires_grad_(True)
        pol.model = get_peft_model(pol.model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                         target_modules="all-linear", task_type="CAUSAL_LM"))
        out["lora_ms"], out["lora_bytes"], out["lora_engine_ms"] = timed_syncs(pol, reps, only=".lora_")
        out["ratio_s"] = out["full_ms"] / out["lora_ms"]
        out["ratio_bytes"] = out["full_bytes"] / out["lora_bytes"]
        return out
    finally:
        pol.close()


def measure_inprocess(model_dir: str, reps: int) -> dict[str, float]:
    from rlvr.rollout.fleet.engines import EnginesPolicy
    from rlvr.rollout.policies.vllm import VLLMPolicy

    engines = EnginesPolicy(model_dir, engines=1, device="cpu")
    inproc = VLLMPolicy(model_dir, device="cpu")
    try:
        nudge(engines.model)
        engines.sync_weights()  # opens the group
        inproc.sync_weights(engines.model)  # warm-up of the baseline
        remote, local = [], []
        for _ in range(reps):
            nudge(engines.model)
            engines.version += 1
            remote.append(engines.sync_weights())
            local.append(inproc.sync_weights(engines.model))
        return {"bytes": engines.sync_bytes[-1], "engines_ms": 1e3 * statistics.median(remote),
                "inproc_ms": 1e3 * statistics.median(local),
                "ratio": statistics.median(remote) / statistics.median(local)}
    finally:
        engines.close()
        inproc.close()


def tiny_llama(path: Path) -> str:
    """A 2-layer Llama (hidden 64, head size 32: the smallest vLLM's CPU attention takes) with rlvr's
    tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.rollout.policies.builtin import build_tokenizer

    tok = build_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    torch.manual_seed(7)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="syncs measured per kind (median reported)")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank (train.lora_rank's default)")
    ap.add_argument("--inprocess", action="store_true",
                    help="engine actor against the in-process engine instead")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    reexec_in_vllm_venv(__file__, ("ray", "vllm", "peft"))
    import ray
    import torch

    torch.set_num_threads(1)
    models = {"tiny Llama (2x64)": tiny_llama(Path(tempfile.mkdtemp()) / "tiny")}
    real = os.environ.get("RLVR_REAL_MODEL")
    if real and Path(real, "config.json").is_file():
        models[Path(real).name] = real
    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        rows = {name: (measure_inprocess(path, args.reps) if args.inprocess
                       else measure(path, args.reps, args.rank))
                for name, path in models.items()}
    finally:
        ray.shutdown()
    if args.json:
        print(json.dumps({"inprocess" if args.inprocess else "lora_vs_full": rows, "reps": args.reps,
                          "rank": args.rank}))
    elif args.inprocess:
        print(f"\n{'model':28s} {'bytes':>13s} {'engines ms':>11s} {'in-process ms':>14s} {'ratio':>6s}")
        for name, r in rows.items():
            print(f"{name:28s} {r['bytes']:13,.0f} {r['engines_ms']:11.1f} {r['inproc_ms']:14.1f} "
                  f"{r['ratio']:6.2f}")
    else:
        print(f"\n{'model':28s} {'params':>11s} {'full bytes':>13s} {'full ms':>9s} "
              f"{'frozen-embed bytes':>19s} {'ms':>7s} {'LoRA bytes':>11s} {'LoRA ms':>8s} {'x bytes':>8s} "
              f"{'x time':>7s}")
        for name, r in rows.items():
            print(f"{name:28s} {r['params']:11,.0f} {r['full_bytes']:13,.0f} {r['full_ms']:9.1f} "
                  f"{r['frozen_bytes']:19,.0f} {r['frozen_ms']:7.1f} {r['lora_bytes']:11,.0f} "
                  f"{r['lora_ms']:8.1f} {r['ratio_bytes']:8.1f} {r['ratio_s']:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
