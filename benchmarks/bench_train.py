"""Seconds per GRPO step: rlvr's trainer against TRL's GRPOTrainer, same model, tasks, group size and batch.

Both train the quickstart's model (the builtin tiny GPT-2, random init) on the code domain's tiny tier with
the same sandboxed verifier (TRL through `rlvr.integrations.trl`), 4 tasks x 8 samples per step, completions
of at most 48 tokens, one gradient pass per batch, lr 1e-5, one torch thread. Steps after a warm-up step are
timed. rlvr's step is sample + rollout (generation overlapped with sandboxed verification) + update + record;
TRL's is its whole `training_step` (generation, reward, loss, optimizer).

Before that, the cost of one verification of a tiny-tier answer both ways, in the same run: the `io` setting
the tier uses (one lean sandboxed run, compared on the host) against the same five cases as a hidden pytest
module (the tier's verifier before `io`), alternating, on the gold answers of 40 tasks.
Run: `.venv/bin/python benchmarks/bench_train.py`.
"""
from __future__ import annotations

import itertools
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

TASKS, GROUP, STEPS, WARMUP, MAX_TOKENS, LR = 4, 8, 5, 1, 48, 1e-5
VERIFY_TASKS = 40


def as_pytest_task(task: Any) -> Any:
    """The tiny task with its io cases written as the hidden pytest module the tier used before `io`."""
    import ast

    from rlvr.domains.code.source import HIDDEN_TESTS, Problem, hidden_tests

    io = task.verifier["io"]
    cases = [ast.literal_eval(line) for line in task.hidden[io["file"]].splitlines()]
    problem = Problem("f", "", "", [], cases, "", {})
    verifier = {k: v for k, v in task.verifier.items() if k not in ("io", "timeout_s")}
    return task.model_copy(update={"hidden": {HIDDEN_TESTS: hidden_tests(problem, task.id)},
                                   "verifier": {**verifier, "tests": [HIDDEN_TESTS]}})


def bench_verify() -> dict[str, list[float]]:
    """Seconds per verification of the same gold answers, io and pytest alternating."""
    from rlvr.config import SandboxConfig
    from rlvr.domains.code.verifier import CodeVerifier
    from rlvr.sandbox import make_pool
    from rlvr.tasks import registry
    from rlvr.tasks.spec import FinalState
    from rlvr.verify.base import VerifyContext

    src = registry.make("code", tier="tiny")
    times: dict[str, list[float]] = {"io": [], "pytest": []}
    pool = make_pool(SandboxConfig())
    try:
        verifier = CodeVerifier(VerifyContext(pool=pool))
        for i in range(VERIFY_TASKS):
            task = src.get(i)
            for name in ("io", "pytest") if i % 2 else ("pytest", "io"):
                t0 = time.perf_counter()
                v = verifier.verify(task if name == "io" else as_pytest_task(task),
                                    FinalState(answer=task.answer))
                times[name].append(time.perf_counter() - t0)
                if not v.passed:
                    raise SystemExit(f"gold answer of {task.id} failed under {name}: {v.checks}")
    finally:
        pool.close()
    return times


def bench_rlvr(model_dir: Path, out: Path) -> list[float]:
    from rlvr.config import RunConfig
    from rlvr.run import build_trainer
    from rlvr.train import loop

    cfg = RunConfig.model_validate({
        "name": "bench", "output_dir": str(out), "tasks": {"train": "code", "heldout": None},
        "policy": {"model": str(model_dir), "max_new_tokens": MAX_TOKENS},
        "rollout": {"group_size": GROUP}, "train": {"steps": STEPS + WARMUP, "batch_size": TASKS, "lr": LR},
        "monitor": {"tensorboard": False, "report": False},
    })
    times = []
    with build_trainer(cfg, str(cfg.run_dir)) as trainer:
        for step in range(STEPS + WARMUP):
            t0 = time.perf_counter()
            loop.train_step(trainer, step)
            times.append(time.perf_counter() - t0)
    return times[WARMUP:]


def bench_trl(model_dir: Path, out: Path) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.config import SandboxConfig
    from rlvr.integrations.trl import build_dataset, reward_function
    from rlvr.sandbox import make_pool

    torch.set_num_threads(1)
    spec, settings = f"code:{TASKS * (STEPS + WARMUP)}", {"code": {"tier": "tiny"}}
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

    pool = make_pool(SandboxConfig())
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        args = GRPOConfig(output_dir=str(out / "trl"), per_device_train_batch_size=TASKS * GROUP,
                          num_generations=GROUP, max_completion_length=MAX_TOKENS, max_steps=STEPS + WARMUP,
                          learning_rate=LR, logging_steps=1, use_cpu=True, bf16=False, report_to="none",
                          save_strategy="no", disable_tqdm=True, seed=0, activation_checkpointing=False)
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args,
                              reward_funcs=reward_function(spec, pool=pool, settings=settings),
                              train_dataset=build_dataset(spec, settings=settings), callbacks=[Stamp()])
        t0 = time.perf_counter()
        trainer.train()
    finally:
        pool.close()
    edges = [t0, *stamps]
    return [b - a for a, b in itertools.pairwise(edges)][WARMUP:]


def main() -> int:
    from rlvr.rollout.policies.builtin import BUILTIN_MODELS, build_tiny_model

    verify_s = bench_verify()
    io_ms, py_ms = (1000 * statistics.median(verify_s[k]) for k in ("io", "pytest"))
    print(f"one verification of a tiny-tier answer ({VERIFY_TASKS} gold answers, isolated pool, median)")
    print(f"  io cases (lean run)  {io_ms:7.1f} ms")
    print(f"  hidden pytest module {py_ms:7.1f} ms")
    print(f"  ratio pytest / io    {py_ms / io_ms:7.2f}x")
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-train-") as tmp:
        root = Path(tmp)
        model_dir = build_tiny_model(root / "model", **BUILTIN_MODELS["tiny"])
        rlvr_s = bench_rlvr(model_dir, root)
        trl_s = bench_trl(model_dir, root)
    r, t = statistics.median(rlvr_s), statistics.median(trl_s)
    print(f"GRPO step, {TASKS} tasks x {GROUP} samples, code tiny tier, sandboxed verification, "
          f"builtin:tiny model, 1 thread ({STEPS} timed steps each)")
    print(f"  rlvr                 {r:7.2f} s/step  (min {min(rlvr_s):.2f}, max {max(rlvr_s):.2f})")
    print(f"  TRL GRPOTrainer      {t:7.2f} s/step  (min {min(trl_s):.2f}, max {max(trl_s):.2f})")
    print(f"  ratio TRL / rlvr     {t / r:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
