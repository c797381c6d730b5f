"""`make gpu-check`: what only a GPU can show, in one script and at most 8 minutes, on a machine with one
NVIDIA GPU.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gpu_check.py [--out DIR] [--budget-s 480]

Checks, each in a child process with its share of the budget (a hang or a crash fails that check alone):

- `nccl_update`: the policy update under FSDP2 on a one-rank NCCL group on the GPU equals the CPU reference
  (same model, samples and seed; TF32 off), to float noise;
- `bf16_update`: `train.mixed_precision = "bf16"` on the GPU: finite loss, weights move, log-probs near
  float32's;
- `long_context`: one update of a 32k-token episode of a 2-layer, 262k-vocabulary model (the chunked log-probs
  of rlvr.train.logprobs): peak GPU memory and seconds;
- `vllm_engine`: a vLLM GPU engine (`vllm` installed) generates, takes the trainer's weights and generates
  again with the new version; skipped, with the reason, where vLLM is not installed;
- `tokens_per_s`: generation throughput through vLLM against `transformers.generate` in the same run, for
  SmolLM2-135M-Instruct where `.rlvr-cache/smollm2-135m-instruct` exists, else the built-in tiny model.

The figures go to `<out>/gpu-check.json` (default `runs/gpu-check/`). Without a GPU it says so in one line and
exits 0. Exit 1 when a check that could run failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ("nccl_update", "bf16_update", "long_context", "vllm_engine", "tokens_per_s")
SHARE = {"nccl_update": 0.15, "bf16_update": 0.1, "long_context": 0.25, "vllm_engine": 0.25,
         "tokens_per_s": 0.25}


def gpu() -> str | None:
    """The GPU's name, or None when torch sees no CUDA device."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


# ------------------------------------------------------------------------------------------ the checks
def _tiny(tmp: Path, **kw: Any) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    return build_tiny_model(tmp,
                            **{"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 512, "seed": 1, **kw})


def _samples(n: int = 4, length: int = 48, vocab: int = 200) -> list[Any]:
    import random

    from rlvr.train.update import Sample

    rng = random.Random(0)
    out = []
    for i in range(n):
        ids = [rng.randrange(3, vocab) for _ in range(length)]
        mask = [0] * (length // 2) + [1] * (length - length // 2)
        out.append(Sample(ids, mask, [-2.0 if m else 0.0 for m in mask], 1.0 if i % 2 else -1.0))
    return out


def _update(model: Any, steps: int = 3, **train: Any) -> tuple[Any, list[float]]:
    from rlvr.config import TrainConfig
    from rlvr.train.update import PolicyUpdater

    updater = PolicyUpdater(model, TrainConfig(lr=1e-3, **train), pad_id=0)
    losses = []
    for s in range(steps):
        metrics = updater.step(_samples(), seed=s)
        losses.append(float(metrics.get("loss/policy", metrics.get("train/loss", 0.0))))
    return model, losses


def check_nccl_update() -> dict[str, Any]:
    import torch
    import torch.distributed as tdist
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from rlvr.train.distributed import transformer_blocks

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        path = _tiny(Path(tmp))
        torch.manual_seed(0)
        cpu, _ = _update(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32))
        store = tdist.TCPStore("127.0.0.1", 0, 1, True)
        tdist.init_process_group("nccl", store=store, rank=0, world_size=1)
        torch.cuda.set_device(0)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda()
        for block in transformer_blocks(model):
            fully_shard(block)
        fully_shard(model)
        torch.manual_seed(0)
        gpu_model, _ = _update(model)
        full = {k: v.full_tensor().cpu() if hasattr(v, "full_tensor") else v.cpu()
                for k, v in gpu_model.state_dict().items()}
        ref = cpu.state_dict()
        worst = max(float((full[k].float() - ref[k].float()).abs().max()) for k in ref)
        tdist.destroy_process_group()
    return {"ok": worst < 1e-3, "max_abs_weight_diff": worst, "tolerance": 1e-3}


def check_bf16_update() -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        path = _tiny(Path(tmp))
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda()
        before = [p.detach().clone() for p in model.parameters()]
        _, losses = _update(model, mixed_precision="bf16")
        moved = max(float((a - b).abs().max()) for a, b in zip(before, model.parameters()))
    finite = all(math.isfinite(loss) for loss in losses)
    return {"ok": finite and moved > 0, "losses": losses, "max_weight_change": moved}


def check_long_context(tokens: int = 32768) -> dict[str, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.config import TrainConfig
    from rlvr.train.update import PolicyUpdater, Sample

    cfg = LlamaConfig(vocab_size=262144, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=tokens + 8,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).cuda()
    half = tokens // 2
    ids = [int(x) for x in torch.randint(3, cfg.vocab_size, (tokens,))]
    samples = [Sample(ids, [0] * half + [1] * (tokens - half), [0.0] * half + [-5.0] * (tokens - half), 1.0)]
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    PolicyUpdater(model, TrainConfig(micro_batch_tokens=tokens, activation_checkpointing=True),
                  pad_id=0).step(samples)
    torch.cuda.synchronize()
    return {"ok": True, "tokens": tokens, "seconds": time.perf_counter() - t0,
            "peak_gpu_gb": torch.cuda.max_memory_allocated() / 2**30}


def _vllm_missing() -> str | None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        return f"vllm is not installed ({exc.name}): pip install vllm in this venv to check the engine"
    return None


def check_vllm_engine() -> dict[str, Any]:
    missing = _vllm_missing()
    if missing:
        return {"ok": None, "skipped": missing}
    from rlvr.envs.messages import Message
    from rlvr.rollout.policies.vllm import VLLMPolicy
    from rlvr.rollout.policy import SamplingParams

    with tempfile.TemporaryDirectory() as tmp:
        policy = VLLMPolicy(str(_tiny(Path(tmp))), device="cuda")
        try:
            conv = [[Message(role="user", content="hello")]]
            first = policy.generate(conv, SamplingParams(max_new_tokens=8, temperature=0.0))[0]
            for p in policy.model.parameters():  # the trainer's weights change ...
                p.data.mul_(0.5)
            policy.version += 1
            seconds = policy.sync_weights()  # ... and reach the engine
            second = policy.generate(conv, SamplingParams(max_new_tokens=8, temperature=0.0))[0]
        finally:
            policy.close()
    return {"ok": second.policy_version in (None, policy.version) and bool(first.token_ids),
            "sync_s": seconds, "version": policy.version}


def check_tokens_per_s() -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    real = ROOT / ".rlvr-cache" / "smollm2-135m-instruct"
    with tempfile.TemporaryDirectory() as tmp:
        path = real if (real / "config.json").is_file() else _tiny(Path(tmp), n_layer=4, n_embd=256, n_head=4)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
        prompts = tok(["Write a haiku about the sea."] * 32, return_tensors="pt", padding=True).to("cuda")
        t0 = time.perf_counter()
        out = model.generate(**prompts, max_new_tokens=128, do_sample=False,
                             pad_token_id=tok.pad_token_id or 0)
        torch.cuda.synchronize()
        hf_tps = (out.shape[1] - prompts["input_ids"].shape[1]) * 32 / (time.perf_counter() - t0)
        result: dict[str, Any] = {"ok": True, "model": str(path.name), "transformers_tok_s": hf_tps}
        missing = _vllm_missing()
        if missing:
            result["vllm"] = {"skipped": missing}
            return result
        from vllm import LLM, SamplingParams

        llm = LLM(model=str(path), dtype="bfloat16", gpu_memory_utilization=0.3, enable_prefix_caching=True)
        t0 = time.perf_counter()
        outs = llm.generate(["Write a haiku about the sea."] * 32,
                            SamplingParams(max_tokens=128, temperature=0.0))
        n = sum(len(o.outputs[0].token_ids) for o in outs)
        result.update(vllm_tok_s=n / (time.perf_counter() - t0))
        result["vllm_over_transformers"] = result["vllm_tok_s"] / hf_tps
    return result


# ------------------------------------------------------------------------------------------ the driver
def _child(name: str) -> None:
    """Run one check in this process and print its result as the last line."""
    try:
        result = globals()[f"check_{name}"]()
    except Exception as exc:  # noqa: BLE001  (a failed check is a result)
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    print("RESULT " + json.dumps(result))


def run_check(name: str, timeout_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True,
                              timeout=timeout_s, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"did not finish in {timeout_s:.0f} s", "wall_s": timeout_s}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    result = json.loads(lines[-1][7:]) if lines else {
        "ok": False,
        "error": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:300]}"}
    result["wall_s"] = time.perf_counter() - t0
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "runs" / "gpu-check")))
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--child", choices=CHECKS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    name = gpu()
    if name is None:
        print("gpu-check: no NVIDIA GPU here (torch sees no CUDA device); nothing to check")
        return 0
    import torch

    report: dict[str, Any] = {"gpu": name, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                              "checks": {}}
    for check in CHECKS:
        report["checks"][check] = run_check(check, SHARE[check] * args.budget_s)
        print(f"gpu-check {check}: {json.dumps(report['checks'][check])}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"gpu-check: wrote {args.out / 'gpu-check.json'}")
    return 1 if any(c.get("ok") is False for c in report["checks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
