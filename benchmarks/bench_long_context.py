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

`--vs-trl` runs rlvr's long path beside a real `trl.GRPOTrainer` step (TRL 1.16) on the same model and finds,
for each, the longest episode whose step's peak RSS is at most FIT_CAP_GB (`--cap GB` to change it):
- trl / trl-gc: `GRPOTrainer.train()` for one step (`max_steps=1`) on a dataset of one prompt, with a reward
  function, on CPU in float32: 2 completions of the prompt (GRPO's smallest group), one per micro-batch
  (`per_device_train_batch_size=1`, `gradient_accumulation_steps=2`), no reference model (`beta=0`, TRL's
  default), AdamW at 1e-6; gradient checkpointing off (trl) or on (trl-gc, TRL's default). Each row is T
  tokens: a prompt of T - TRL_COMPLETION random tokens and a completion of exactly TRL_COMPLETION generated
  tokens (`max_completion_length` with `min_new_tokens` of the same, so no end token stops it).
- Why a short completion is fair: GRPOTrainer's forward runs the backbone over the prompt and the completion,
  and its fused LM head (trl.kernels.chunked_logprob) scores every position on a device without Triton (on CPU
  it keeps only the completion's log-probs afterwards), so its memory is set by T, not by the split, while
  generating T/2 tokens on two CPU cores would take minutes per run. The run checks this: at SPLIT_CHECK
  tokens the first TRL path also runs with half of T generated (trl-half or trl-gc-half), as rlvr's episode
  is.
- A TRL row's seconds per 1k tokens are those of its step less generation, over the 2T tokens of its two
  completions; rlvr's are over its one episode.
- Each path climbs the lengths until its peak passes the cap (a longer episode then does not fit either); the
  ratio is rlvr's longest fitting T over TRL's, a lower bound where rlvr fits the longest length tried. The
  same runs are also read at the LOWER_CAPS.
`--vs-trl` defaults to `--models llama2-49k --paths long,trl-gc` (about 30 minutes on this machine, shared);
`--paths long,trl,trl-gc` adds TRL without checkpointing (about twice as long), `--models llama2-262k` the
large vocabulary (over an hour with all three paths).

Each configuration runs in a fresh subprocess (one torch thread), whose peak RSS (`ru_maxrss`) is reported and
which is stopped if its RSS passes MEMORY_CAP_GB; the step is timed after the model and the episode are built.
`--quick` runs lengths up to 4k only; `--models a,b` runs those models only (names as in the table:
llama2-49k, llama2-262k, smollm2-135m), `--lengths 4096,8192` those lengths, `--paths long` one path (a run
resumed past the dense path's limit).
Run: `.venv/bin/python benchmarks/bench_long_context.py [--quick] [--vs-trl] [--models NAMES] [--json PATH]`.
"""
from __future__ import annotations

import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = ROOT / ".rlvr-cache" / "smollm2-135m-instruct"
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
MEMORY_CAP_GB = 12.0
"""No dense-path run whose predicted peak RSS is above this, and any child whose RSS passes it is stopped (the
machine has 24 GB, shared)."""
FIT_CAP_GB = 8.0
"""`--vs-trl`: an episode length fits when its step's peak RSS is at most this."""
TRL_COMPLETION = 128
"""`--vs-trl`: tokens GRPOTrainer generates per completion; the prompt holds the rest of the T tokens."""
SPLIT_CHECK = 2048
"""`--vs-trl`: the length at which the first TRL path also runs with half of T generated (its `-half`
variant), to show that the split does not move its peak."""
LOWER_CAPS = (4.0, 6.0)
"""`--vs-trl`: the longest fitting episodes are also read off the same runs at these caps (below the
run's)."""
MODELS = {"llama2-49k": 49_152, "llama2-262k": 262_144}
TRL_PATHS = ("trl", "trl-gc")


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
                           logprobs=[0.0] * half + [-math.log(vocab)] * (length - half),
                           advantage=1.0)
    updater = update.PolicyUpdater(model, cfg, pad_id=0)
    setup_gb = max_rss_gb()
    t0 = time.perf_counter()
    metrics = updater.step([sample])
    seconds = time.perf_counter() - t0
    return {"model": name, "path": path, "tokens": length, "seconds": seconds,
            "s_per_1k": seconds / (length / 1000), "peak_rss_gb": max_rss_gb(), "setup_rss_gb": setup_gb,
            "loss": metrics.get("train/loss"), "grad_norm": metrics.get("train/grad_norm")}


def max_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KB on Linux


def word_tokenizer(vocab: int):
    """A tokenizer whose words are token ids (`t123`), so that a prompt of n words is exactly n tokens; ids 0,
    1 and 2 are pad, end and unknown (named so that no other word contains them)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"t{i}": i for i in range(3, vocab)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>")


def one_trl(name: str, path: str, length: int) -> dict:
    """One GRPOTrainer step in this process (see the module docstring for its settings): its seconds, the part
    of them spent generating, and this process's peak RSS."""
    import warnings

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    model = build(name)
    vocab = model.config.vocab_size
    tok = word_tokenizer(vocab)
    model.config.pad_token_id = model.generation_config.pad_token_id = tok.pad_token_id
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    completion = length // 2 if path.endswith("-half") else TRL_COMPLETION
    g = torch.Generator().manual_seed(length)
    prompt = " ".join(f"t{i}" for i in torch.randint(3, vocab, (length - completion,), generator=g).tolist())

    def reward(completions: list, **_: object) -> list[float]:  # 0 and 1: the group's advantages are -/+0.71
        return [float(i % 2) for i in range(len(completions))]

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, seed=0, report_to="none",
                          save_strategy="no",
                          disable_tqdm=True, logging_steps=1, max_steps=1, learning_rate=1e-6,
                          num_generations=2, per_device_train_batch_size=1, gradient_accumulation_steps=2,
                          max_completion_length=completion, generation_kwargs={"min_new_tokens": completion},
                          gradient_checkpointing=path.startswith("trl-gc"))
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tok,
                              train_dataset=Dataset.from_dict({"prompt": [prompt]}))
        generate, generating = trainer._generate, []

        def timed_generate(*a: object, **kw: object) -> object:
            t = time.perf_counter()
            try:
                return generate(*a, **kw)
            finally:
                generating.append(time.perf_counter() - t)

        trainer._generate = timed_generate  # type: ignore[method-assign]
        setup_gb = max_rss_gb()
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
        checkpointed = bool(getattr(trainer.model, "is_gradient_checkpointing", False))
    logged = trainer.state.log_history[0]
    update_s = seconds - sum(generating)
    return {"model": name, "path": path, "tokens": length, "completion": completion, "seconds": seconds,
            "generate_s": sum(generating), "s_per_1k": update_s / (2 * length / 1000),
            "peak_rss_gb": max_rss_gb(),
            "setup_rss_gb": setup_gb, "checkpointing": checkpointed,
            "trained_tokens": logged.get("num_tokens"),
            "loss": logged.get("loss"),
            "grad_norm": logged.get("grad_norm")}


def rss_gb(pid: int) -> float:
    """The current RSS of process `pid` (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1e6 for line in status.splitlines() if line.startswith("VmRSS:")),
                0.0)


def measure(name: str, path: str, length: int) -> dict:
    """`one` (or `one_trl`) in a fresh subprocess, stopped if its RSS passes MEMORY_CAP_GB."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, __file__, "--one", name, path, str(length)], stdout=out,
                                 stderr=err, text=True, cwd=ROOT)
        stopped = False
        while child.poll() is None:
            if rss_gb(child.pid) > MEMORY_CAP_GB:  # the machine is shared: never let one run take it over
                child.kill()
                child.wait()
                stopped = True
            time.sleep(0.1)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if stopped:
        return {"model": name, "path": path, "tokens": length, "over_gb": MEMORY_CAP_GB,
                "error": [f"stopped: RSS passed {MEMORY_CAP_GB} GB"]}
    if child.returncode != 0:
        return {"model": name, "path": path, "tokens": length, "error": stderr.strip().splitlines()[-1:]}
    return json.loads(stdout.strip().splitlines()[-1])


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
        step = one_trl if argv[2].startswith("trl") else one
        print(json.dumps(step(argv[1], argv[2], int(argv[3]))))
        return 0
    quick, with_trl = "--quick" in argv, "--vs-trl" in argv
    cap = float(argv[argv.index("--cap") + 1]) if "--cap" in argv else FIT_CAP_GB if with_trl else None
    out_json = argv[argv.index("--json") + 1] if "--json" in argv else None
    lengths = [t for t in LENGTHS if not quick or t <= 4096]
    models = list(MODELS) + (["smollm2-135m"] if SMOLLM2.is_dir() else [])
    if "--models" in argv:  # a subset, e.g. `--models smollm2-135m`
        models = [m for m in argv[argv.index("--models") + 1].split(",") if m in models]
    elif with_trl:
        models = ["llama2-49k"]
    if "--lengths" in argv:
        lengths = [int(x) for x in argv[argv.index("--lengths") + 1].split(",")]
    paths = (argv[argv.index("--paths") + 1].split(",") if "--paths" in argv
             else ["long", "trl-gc"] if with_trl else ["dense", "long"])
    split_path = next((path for path in paths if path in TRL_PATHS), None) if with_trl else None
    if not SMOLLM2.is_dir() and not with_trl:
        print(f"(SmolLM2-135M-Instruct not built at {SMOLLM2}: `make real-model`; skipped)")
    results: list[dict] = []
    print(f"{'model':<14} {'path':<8} {'tokens':>7} {'s/1k tok':>9} {'peak RSS GB':>12}", flush=True)
    for name in models:
        history: dict[str, list[dict]] = {path: [] for path in paths}
        for length in lengths:
            if name == "smollm2-135m" and length > 8192:
                break
            for path in paths:
                reason = skipped(path, history[path], length, cap)
                if reason:
                    results.append({"model": name, "path": path, "tokens": length, "skipped": reason})
                    print(f"{name:<14} {path:<8} {length:>7} skipped: {reason}", flush=True)
                    continue
                runs = [path] + ([f"{path}-half"] if path == split_path and length == SPLIT_CHECK else [])
                for run in runs:
                    r = measure(name, run, length)
                    results.append(r)
                    if run == path:
                        history[path].append(r)
                    show(r)
    summary = goals(results)
    comparison = vs_trl(results, cap) if cap is not None else {}
    for line in summary + comparison.get("lines", []):
        print(line)
    if out_json:
        Path(out_json).write_text(json.dumps({"machine": platform.platform(),
                                              "date": time.strftime("%Y-%m-%d"),
                                              "results": results, "goals": summary, "vs_trl": comparison},
                                             indent=1))
    return 0


def skipped(path: str, history: list[dict], length: int, cap: float | None) -> str | None:
    """Why `path` does not run at `length` after its `history` (None: it runs). The dense and TRL paths stop
    after an error or a stop; the dense path also where its predicted peak passes MEMORY_CAP_GB (its memory is
    linear in T). TRL's levels off past its head's tile of positions, so a line through two points would
    overstate it: it runs, and `measure` stops it if it passes MEMORY_CAP_GB. With a fit cap every path stops
    once a shorter episode passed it."""
    last = history[-1] if history else None
    if path == "long" and cap is None:
        return None
    if last is not None and "peak_rss_gb" not in last:
        return "after an error or a stop at a shorter length"
    if cap is not None and last is not None and last["peak_rss_gb"] > cap:
        return f"over the {cap:g} GB cap at {last['tokens']} tokens"
    guess = predicted(history, length)
    if path == "dense" and guess is not None and guess > MEMORY_CAP_GB:
        return f"predicted ~{guess:.1f} GB"
    return None


def show(r: dict) -> None:
    head = f"{r['model']:<14} {r['path']:<8} {r['tokens']:>7}"
    if "error" in r:
        print(f"{head} error: {r['error']}", flush=True)
        return
    extra = f"  (generating {r['generate_s']:.1f} s of {r['seconds']:.1f})" if "generate_s" in r else ""
    print(f"{head} {r['s_per_1k']:>9.2f} {r['peak_rss_gb']:>12.2f}{extra}", flush=True)


def vs_trl(results: list[dict], cap: float) -> dict:
    """Per model: the longest episode each path trains in at most `cap` GB peak RSS, and rlvr's over TRL's (a
    lower bound where rlvr fit the longest length tried, or where TRL fit none)."""
    out: dict = {"cap_gb": cap, "trl_completion": TRL_COMPLETION, "models": {}, "lines": []}
    for name in dict.fromkeys(r["model"] for r in results if r["path"] in TRL_PATHS):
        rows = [r for r in results if r["model"] == name]
        tried = [r["tokens"] for r in rows if "skipped" not in r]
        longest = fitting(rows, cap)
        ratios: dict[str, str] = {}
        for path in TRL_PATHS:
            rlvr, trl = longest["long"], longest[path]
            if rlvr is None or not any(r["path"] == path for r in rows):
                continue
            bound = ">= " if rlvr == max(tried) else ""
            ratios[path] = (f"{bound}{rlvr / trl:g}x" if trl else f"> {rlvr / min(tried):g}x (TRL fits none)")
        lower = {c: fitting(rows, c) for c in LOWER_CAPS if c < cap}
        out["models"][name] = {"longest": longest, "ratio": ratios, "longest_at_lower_caps": lower}
        out["lines"].append(f"{name}: longest episode in <= {cap:g} GB peak RSS: rlvr {longest['long']}, "
                            f"TRL GRPOTrainer {longest['trl']} (gradient checkpointing off), "
                            f"{longest['trl-gc']} (on)")
        out["lines"].append(f"{name}: rlvr / TRL: {ratios.get('trl-gc', '-')} against TRL with "
                            f"checkpointing, {ratios.get('trl', '-')} without (goal >= 4x)")
        for c, at in lower.items():
            out["lines"].append(f"{name}: (the same runs read at {c:g} GB: rlvr {at['long']}, TRL "
                                f"{at['trl']} (checkpointing off), {at['trl-gc']} (on))")
        split = {r["path"]: r for r in rows if r["tokens"] == SPLIT_CHECK and "peak_rss_gb" in r}
        for path in TRL_PATHS:
            if path in split and f"{path}-half" in split:
                out["lines"].append(
                    f"{name}: {path} at {SPLIT_CHECK} tokens: {split[path]['peak_rss_gb']:.2f} GB with "
                    f"{TRL_COMPLETION} generated, {split[path + '-half']['peak_rss_gb']:.2f} GB with "
                    f"{SPLIT_CHECK // 2}")
    return out


def fitting(rows: list[dict], cap: float) -> dict[str, int | None]:
    """The longest episode each path trains in at most `cap` GB peak RSS (None: none it tried)."""
    return {path: max((r["tokens"] for r in rows if r["path"] == path
                       and r.get("peak_rss_gb", float("inf")) <= cap), default=None)
            for path in ("long", *TRL_PATHS)}


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
