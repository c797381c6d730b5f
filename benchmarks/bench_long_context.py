"""Peak memory and seconds per thousand tokens of one policy update against episode length, today's path
beside the long-context one.

One update is `PolicyUpdater.step` on one episode of T tokens (the second half generated, advantage +1,
ppo_clip, token aggregation), on a 2-layer Llama-style model built from its config (hidden 576, intermediate
1536, 9 heads, 3 KV heads, tied embeddings: SmolLM2-135M's shapes with 2 of its 30 layers) at vocabularies of
49,152 (SmolLM2's) and 262,144, and on SmolLM2-135M-Instruct itself up to its 8k window when
`.rlvr-cache/smollm2-135m-instruct` exists (`make real-model`).

- long: what rlvr does now with `train.micro_batch_tokens = T` and `train.activation_checkpointing = true`:
  log-probs over chunks of positions (rlvr.train.logprobs), blocks recomputed in the backward.
- dense: the path before it, with the (T, V) float32 logits, their log-softmax and its gradient
  (rlvr.train.logprobs.dense_scores in place of the chunked scorer; no checkpointing), run until the next
  length's predicted peak (from its two longest measured points) passes MEMORY_CAP_GB, so the machine never
  runs out of memory.

Each configuration runs in a fresh subprocess (one torch thread), whose peak RSS (`ru_maxrss`) is reported;
the step is timed after the model and the episode are built. `--quick` runs lengths up to 4k only;
`--models a,b` runs those models only (names as in the table: llama2-49k, llama2-262k, smollm2-135m),
`--lengths 4096,8192` those lengths, `--paths long` one path (a run resumed past the dense path's limit).
Run: `.venv/bin/python benchmarks/bench_long_context.py [--quick] [--models NAMES] [--json PATH]`.
"""
from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = ROOT / ".rlvr-cache" / "smollm2-135m-instruct"
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
MEMORY_CAP_GB = 12.0
"""No dense-path run whose predicted peak RSS is above this (the machine has 24 GB, shared)."""
MODELS = {"llama2-49k": 49_152, "llama2-262k": 262_144}


def build(name: str):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if name == "smollm2-135m":
        return AutoModelForCausalLM.from_pretrained(SMOLLM2, dtype=torch.float32, attn_implementation="sdpa")
    cfg = LlamaConfig(vocab_size=MODELS[name], hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                      num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
                      max_position_embeddings=1 << 17, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg)


def one(name: str, path: str, length: int) -> dict:
    """One update in this process: its seconds and this process's peak RSS."""
    import torch

    from rlvr.config import TrainConfig
    from rlvr.train import logprobs, update

    torch.set_num_threads(1)
    model = build(name).eval()
    vocab = model.config.vocab_size
    if path == "dense":
        update.token_scores = logprobs.dense_scores  # type: ignore[assignment]  (the path before chunking)
        cfg = TrainConfig(lr=1e-6)
    else:
        cfg = TrainConfig(lr=1e-6, micro_batch_tokens=length, activation_checkpointing=True)
    g = torch.Generator().manual_seed(length)
    ids = torch.randint(0, vocab, (length,), generator=g).tolist()
    half = length // 2
    sample = update.Sample(token_ids=ids, loss_mask=[0] * half + [1] * (length - half),
                           logprobs=[0.0] * half + [-float(torch.log(torch.tensor(float(vocab))))] * (length - half),
                           advantage=1.0)
    updater = update.PolicyUpdater(model, cfg, pad_id=0)
    t0 = time.perf_counter()
    metrics = updater.step([sample])
    seconds = time.perf_counter() - t0
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KB on Linux
    return {"model": name, "path": path, "tokens": length, "seconds": seconds,
            "s_per_1k": seconds / (length / 1000), "peak_rss_gb": rss_gb,
            "loss": metrics.get("train/loss"), "grad_norm": metrics.get("train/grad_norm")}


def measure(name: str, path: str, length: int) -> dict:
    """`one` in a fresh subprocess."""
    done = subprocess.run([sys.executable, __file__, "--one", name, path, str(length)], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        return {"model": name, "path": path, "tokens": length, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def predicted(points: list[dict], length: int) -> float | None:
    """Peak RSS at `length` by the line through the two longest measured points (None with fewer)."""
    ok = [p for p in points if "peak_rss_gb" in p]
    if len(ok) < 2:
        return None
    a, b = ok[-2], ok[-1]
    slope = (b["peak_rss_gb"] - a["peak_rss_gb"]) / (b["tokens"] - a["tokens"])
    return b["peak_rss_gb"] + slope * (length - b["tokens"])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(one(argv[1], argv[2], int(argv[3]))))
        return 0
    quick = "--quick" in argv
    out_json = argv[argv.index("--json") + 1] if "--json" in argv else None
    lengths = [t for t in LENGTHS if not quick or t <= 4096]
    models = list(MODELS) + (["smollm2-135m"] if SMOLLM2.is_dir() else [])
    if "--models" in argv:  # a subset, e.g. `--models smollm2-135m`
        models = [m for m in argv[argv.index("--models") + 1].split(",") if m in models]
    if "--lengths" in argv:
        lengths = [int(x) for x in argv[argv.index("--lengths") + 1].split(",")]
    paths = argv[argv.index("--paths") + 1].split(",") if "--paths" in argv else ["dense", "long"]
    if not SMOLLM2.is_dir():
        print(f"(SmolLM2-135M-Instruct not built at {SMOLLM2}: `make real-model`; skipped)")
    results: list[dict] = []
    print(f"{'model':<14} {'path':<6} {'tokens':>7} {'s/1k tok':>9} {'peak RSS GB':>12}", flush=True)
    for name in models:
        dense: list[dict] = []
        for length in lengths:
            if name == "smollm2-135m" and length > 8192:
                break
            for path in paths:
                if path == "dense":
                    guess = predicted(dense, length)
                    if dense and "peak_rss_gb" not in dense[-1] or guess is not None and guess > MEMORY_CAP_GB:
                        print(f"{name:<14} {path:<6} {length:>7} {'skipped':>9} {'~%.1f' % (guess or 0):>12}",
                              flush=True)
                        continue
                r = measure(name, path, length)
                results.append(r)
                if path == "dense":
                    dense.append(r)
                if "error" in r:
                    print(f"{name:<14} {path:<6} {length:>7} error: {r['error']}", flush=True)
                else:
                    print(f"{name:<14} {path:<6} {length:>7} {r['s_per_1k']:>9.2f} {r['peak_rss_gb']:>12.2f}",
                          flush=True)
    summary = goals(results)
    for line in summary:
        print(line)
    if out_json:
        Path(out_json).write_text(json.dumps({"machine": platform.platform(), "date": time.strftime("%Y-%m-%d"),
                                              "results": results, "goals": summary}, indent=1))
    return 0


def goals(results: list[dict]) -> list[str]:
    """The issue's goals, checked on the 262k model: 32k in <= 6 GB, slope <= 1/8 of the dense path's, s/1k at
    16k within 1.5x of 1k."""
    def pts(path: str) -> dict[int, dict]:
        return {r["tokens"]: r for r in results if r["model"] == "llama2-262k" and r["path"] == path
                and "peak_rss_gb" in r}

    long, dense = pts("long"), pts("dense")
    out = []
    if 32768 in long:
        out.append(f"262k, 32k tokens: {long[32768]['peak_rss_gb']:.2f} GB peak RSS (goal <= 6)")
    if len(long) >= 2 and len(dense) >= 2:
        lo, hi = min(long), max(long)
        slope_long = (long[hi]["peak_rss_gb"] - long[lo]["peak_rss_gb"]) / (hi - lo) * 1000
        dlo, dhi = min(dense), max(dense)
        slope_dense = (dense[dhi]["peak_rss_gb"] - dense[dlo]["peak_rss_gb"]) / (dhi - dlo) * 1000
        out.append(f"262k slope: {slope_long:.3f} GB/1k tokens vs dense {slope_dense:.3f} "
                   f"(ratio 1/{slope_dense / max(slope_long, 1e-9):.1f}; goal <= 1/8)")
    if 1024 in long and 16384 in long:
        ratio = long[16384]["s_per_1k"] / long[1024]["s_per_1k"]
        out.append(f"262k s/1k tokens at 16k vs 1k: {ratio:.2f}x (goal <= 1.5x)")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
