"""Seconds per GRPO step: rlvr on 2 ranks (torchrun) against TRL's GRPOTrainer launched with accelerate on the
same 2 processes, on multi-turn code tasks whose tools run in the sandbox.

Same on both sides: the model (a 2-layer GPT-2 built here, with Qwen3's chat template, whose tool calls both
sides parse), the tasks (8 multi-turn `write add(a, b)` code tasks, verified by rlvr's hidden tests), 2
prompts x 4 samples a step (one group per process), 3 model turns an episode, the same scripted completions,
AdamW at the same rate, no KL term, one thread per process. TRL reaches the tasks through rlvr's own TRL door
(`rlvr.integrations.trl.environment_factory`: its tools run in rlvr's bubblewrap sandbox and its reward is
rlvr's verdict), so both sides pay the same sandbox and verification costs per call and differ in how they
schedule them.

Scripted completions: a random model writes no tool calls, so on both sides the sampler is constrained to the
same text per turn (turn 1 writes add.py, right on even rows and wrong on odd ones; turn 2 runs the tests;
turn 3 submits); every token still comes out of the model's forward pass, whose log-probs both trainers train
on. TRL's through a transformers LogitsProcessor (its `generate`), rlvr's through the sampler of its hf
backend.

    python benchmarks/bench_vs_trl.py          # about 7 minutes on 2 cores

Run as a process of a measured run (`torchrun ... bench_vs_trl.py rlvr CONFIG` or `... trl DIR`) it installs
the scripted sampler and trains. TRL's processes are started by torchrun too: `accelerate launch --cpu
--num_processes 2` starts one process (accelerate's multi-CPU mode goes through mpirun), while the Accelerator
inside GRPOTrainer runs torchrun's two processes as MULTI_CPU over gloo, as it would run accelerate's.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = 5
"""Measured: steps 2..STEPS (the first step warms up both sides)."""
GROUP, PROMPTS, LR = 4, 2, 1e-5
WORKSPACE = {"add.py": "def add(a, b):\n    raise NotImplementedError\n",
             "test_visible.py": "from add import add\n\n\ndef test_one():\n    assert add(1, 1) == 2\n"}
HIDDEN = {"test_hidden.py": "from add import add\n\n\ndef test_a():\n    assert add(2, 3) == 5\n\n\n"
                            "def test_b():\n    assert add(-1, 1) == 0\n"}
RIGHT, WRONG = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"


def call(name: str, **arguments: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


SCRIPTS = [call("write_file", path="add.py", content=RIGHT), call("write_file", path="add.py", content=WRONG),
           call("run_tests"), call("submit")]


def plan(prompt: str, row: int) -> str:
    """The scripted completion of a turn: by the tool results already in the prompt, and the row's parity."""
    turn = prompt.count("<tool_response>")
    return SCRIPTS[row % 2] if turn == 0 else SCRIPTS[2] if turn == 1 else SCRIPTS[3]


def write_pack(root: Path, n: int = 8) -> Path:
    for i in range(n):
        d = root / f"add{i}"
        for sub, files in (("workspace", WORKSPACE), ("hidden", HIDDEN), ("solution", {"add.py": RIGHT})):
            for rel, text in files.items():
                (d / sub / rel).parent.mkdir(parents=True, exist_ok=True)
                (d / sub / rel).write_text(text)
        (d / "task.toml").write_text(f'id = "add{i}"\ndomain = "code"\n[limits]\nmax_turns = '
                                     f'4\nmax_tokens = 4096\n')
        (d / "prompt.md").write_text("Write add(a, b) in add.py; run the tests, then submit.")
    return root


def build_model(path: Path) -> Path:
    import trl
    from transformers import AutoTokenizer

    from rlvr.rollout.policies.builtin import build_tiny_model

    build_tiny_model(path, n_layer=2, n_embd=64, n_head=2, n_positions=4096, seed=0)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    tok.save_pretrained(path)
    return path


# ------------------------------------------------------------------------------------------------ rlvr side
def rlvr_config(out: Path, model: Path, pack: Path, sharding: str) -> dict:
    return {
        "name": f"rlvr-{sharding}", "output_dir": str(out), "seed": 1,
        "tasks": {"train": str(pack), "heldout": ""},
        "sandbox": {"isolation": "bwrap", "workers": 1},
        "policy": {"model": str(model), "max_new_tokens": 256, "device": "cpu", "max_context": 4096,
                   "temperature": 1.0},
        "rollout": {"group_size": GROUP, "max_turns": 3, "max_tokens": 4096},
        "train": {"steps": STEPS, "batch_size": PROMPTS, "lr": LR, "checkpoint_every": 100,
                  "micro_batch_size": 8,
                  "world_size": 2, "kl_coef": 0.0, "sharding": sharding},
        "sft": {"enabled": False},
        "monitor": {"tensorboard": False, "report": False},
    }


def install_rlvr_script() -> None:
    """The hf backend's sampler, constrained to `plan`: the noise each row would draw carries its planned
    token ids instead, and the sampler takes them with their log-probs under the model."""
    import threading

    import torch

    from rlvr.rollout.policies import hf

    local = threading.local()
    decode = hf.HFPolicy._decode

    def scripted_decode(self, model, prompts, budgets, params, seeds):  # type: ignore[no-untyped-def]
        eos = sorted(self.eos_ids)[0]
        rows = [self.tokenizer.encode(plan(self.tokenizer.decode(p), i), add_special_tokens=False) + [eos]
                for i, p in enumerate(prompts)]
        width = max(budgets)
        local.plan = torch.tensor([(r + [eos] * width)[:width] for r in rows], dtype=torch.float64)
        try:
            return decode(self, model, prompts, budgets, params, seeds)
        finally:
            local.plan = None

    def planned_noise(seeds, steps, device):  # type: ignore[no-untyped-def]
        return local.plan[:, :steps].to(device)

    def planned_tokens(logits, temperature, top_p, noise):  # type: ignore[no-untyped-def]
        tok = noise.long()
        return tok, logits.gather(-1, tok[:, None]).squeeze(-1) - logits.logsumexp(-1)

    hf.HFPolicy._decode = scripted_decode
    hf.row_noise = planned_noise
    hf.sample_tokens = planned_tokens


def rlvr_rank(cfg_path: str) -> int:
    install_rlvr_script()
    from rlvr.cli import main as cli

    return cli(["train", cfg_path])


def rlvr_measure(run_dir: Path) -> dict:
    from rlvr.monitor.monitor import read_metrics
    from rlvr.store.layout import RunLayout

    steps = [m for m in read_metrics(RunLayout(run_dir).metrics).values() if "time/rollout_s" in m][1:]
    wall = [sum(v for k, v in m.items() if k.startswith("time/")) for m in steps]
    phases = {"generate": statistics.median(m["rollout/generate_s"] for m in steps),
              "tools + verify (beside generation)": statistics.median(
                  m["time/rollout_s"] - m["rollout/generate_s"] for m in steps),
              "update": statistics.median(m["time/update_s"] for m in steps),
              "other (sample, record)": statistics.median(
                  m.get("time/sample_s", 0) + m.get("time/record_s", 0) for m in steps)}
    reward = [m.get("reward/mean", m.get("train/reward_mean", float("nan"))) for m in steps]
    tokens = [m["rollout/generated_tokens"] for m in steps]
    return {"s_per_step": statistics.median(wall), "steps": wall, "phases": phases, "reward": reward,
            "generated_tokens_rank0": tokens}


# ------------------------------------------------------------------------------------------------- TRL side
def trl_process(work: str) -> None:
    """One process of TRL's run: GRPOTrainer with rlvr's tool environment, the scripted LogitsProcessor, and
    timers around its phases (written as JSON by the main process)."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        LogitsProcessor,
        LogitsProcessorList,
        TrainerCallback,
    )
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import add_response_schema

    from rlvr.integrations.trl import dataset, environment_factory

    torch.set_num_threads(1)
    work_dir = Path(work)
    tokenizer = add_response_schema(AutoTokenizer.from_pretrained(work_dir / "model"))

    class Force(LogitsProcessor):
        def __init__(self) -> None:
            self.start: int | None = None
            self.plans: list[list[int]] = []

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            if self.start is None:
                self.start = input_ids.shape[1]
                for row in range(input_ids.shape[0]):
                    text = plan(tokenizer.decode(input_ids[row], skip_special_tokens=False), row)
                    self.plans.append(tokenizer.encode(text,
                                                       add_special_tokens=False) + [tokenizer.eos_token_id])
            k = input_ids.shape[1] - self.start
            forced = torch.full_like(scores, float("-inf"))
            for row, p in enumerate(self.plans):
                forced[row, p[min(k, len(p) - 1)]] = 0.0
            return forced

    base = AutoModelForCausalLM.from_pretrained(work_dir / "model")

    class Scripted(type(base)):  # type: ignore[misc]
        def generate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            kwargs["logits_processor"] = LogitsProcessorList([Force()])
            return super().generate(*args, **kwargs)

    model = Scripted.from_pretrained(work_dir / "model")
    timers: dict[str, float] = {}

    inside: list[str] = []  # the timed calls in progress (a turn generated inside the tool loop counts twice)

    def timed(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*a, **k):  # type: ignore[no-untyped-def]
            key = name + ("@loop" if "_tool_call_loop" in inside else "")
            inside.append(name)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                inside.pop()
                timers[key] = timers.get(key, 0.0) + time.perf_counter() - t0
        return wrapper

    class Timed(GRPOTrainer):
        pass

    for name in ("_generate_single_turn", "_tool_call_loop", "_calculate_rewards",
                 "_generate_and_score_completions",
                 "_get_per_token_logps_and_entropies"):
        setattr(Timed, name, timed(name, getattr(GRPOTrainer, name)))

    steps: list[dict[str, float]] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            timers.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
            steps.append({"wall": time.perf_counter() - self.t0, **timers})

    Env = environment_factory(str(work_dir / "pack"), max_turns=4)
    args = GRPOConfig(output_dir=str(work_dir / "trl-out"), per_device_train_batch_size=GROUP,
                      num_generations=GROUP, max_completion_length=4096, max_tool_calling_iterations=3,
                      max_steps=STEPS, learning_rate=LR, beta=0.0, logging_steps=1, use_cpu=True, bf16=False,
                      activation_checkpointing=False, report_to="none", save_strategy="no", disable_tqdm=True,
                      seed=1, shuffle_dataset=False, temperature=1.0)
    trainer = Timed(model=model, args=args, train_dataset=dataset(Env), processing_class=tokenizer,
                    environment_factory=Env, callbacks=[StepClock()])
    try:
        trainer.train()
    finally:
        Env.runtime.close()
    if trainer.accelerator.is_main_process:
        rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
        lengths = [h.get("completions/mean_length") for h in trainer.state.log_history if "reward" in h]
        (work_dir / "trl.json").write_text(json.dumps({"steps": steps, "reward": rewards, "lengths": lengths,
                                                       "world": trainer.accelerator.num_processes,
                                                       "type": str(trainer.accelerator.distributed_type)}))


def trl_measure(work: Path) -> dict:
    data = json.loads((work / "trl.json").read_text())
    steps = data["steps"][1:]

    def med(f) -> float:  # type: ignore[no-untyped-def]
        return statistics.median(f(s) for s in steps)
    gen = "_generate_single_turn"
    phases = {"generate (all turns)": med(lambda s: s.get(gen, 0.0) + s.get(gen + "@loop", 0.0)),
              "tools (the tool loop less its turns)": med(
                  lambda s: s.get("_tool_call_loop", 0.0) - s.get(gen + "@loop", 0.0)),
              "reward (rlvr verdicts)": med(lambda s: s.get("_calculate_rewards", 0.0)),
              "update (log-probs, backward, optimizer)": med(
                  lambda s: s["wall"] - s.get("_generate_and_score_completions", 0.0)),
              "of which log-prob forwards": med(lambda s: s.get("_get_per_token_logps_and_entropies", 0.0))}
    return {"s_per_step": med(lambda s: s["wall"]), "steps": [s["wall"] for s in steps], "phases": phases,
            "reward": data["reward"][1:], "world": data["world"], "type": data["type"],
            "mean_length": data["lengths"][1:]}


# ------------------------------------------------------------------------------------------------- the run
def launch(cmd: list[str], log: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}",
           "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    with log.open("w") as f:
        res = subprocess.run(cmd, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=False)
    if res.returncode != 0:
        sys.exit(f"{cmd[:4]}... failed with {res.returncode}; see {log}")
    return time.perf_counter() - t0


def main() -> None:
    import tomli_w

    work = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    build_model(work / "model")
    write_pack(work / "pack")
    py = sys.executable
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__]
    print(f"work dir {work}", file=sys.stderr)
    rlvr: dict[str, list[dict]] = {"fsdp": [], "ddp": []}
    trl: list[dict] = []
    for rep in range(2):  # alternated: the machine is shared
        for sharding in ("fsdp", "ddp"):
            cfg = work / f"rlvr-{sharding}-{rep}.toml"
            out = work / f"out-{rep}"
            cfg.write_text(tomli_w.dumps(rlvr_config(out, work / "model", work / "pack", sharding)))
            launch([*torchrun, "rlvr", str(cfg)], work / f"rlvr-{sharding}-{rep}.log")
            rlvr[sharding].append(rlvr_measure(out / f"rlvr-{sharding}"))
        # accelerate's launcher starts one CPU process (its multi-CPU mode goes through mpirun): the two
        # processes
        # come from torchrun, and the Accelerator inside GRPOTrainer runs them as MULTI_CPU over gloo
        launch([*torchrun, "trl", str(work)], work / f"trl-{rep}.log")
        trl.append(trl_measure(work))
    print(f"{STEPS} GRPO steps of {PROMPTS} prompts x {GROUP} samples on 2 processes (one thread each), "
          f"3 scripted turns an episode (255 generated tokens), tools and verification in the bubblewrap "
          f"sandbox; steps 2..{STEPS} "
          "measured, two runs of each side alternated")
    best: dict[str, float] = {}
    for sharding, runs in rlvr.items():
        best[sharding] = statistics.median(r["s_per_step"] for r in runs)
        print(f"rlvr ({sharding}, torchrun, 2 ranks): {best[sharding]:.2f} s/step  runs "
              f"{[round(r['s_per_step'], 2) for r in runs]}")
        print("  phases (rank 0, median s): " + "; ".join(f"{k} {v:.2f}" for k,
                                                          v in runs[-1]["phases"].items()))
        print(f"  reward by step {runs[-1]['reward']}")
    t = statistics.median(r["s_per_step"] for r in trl)
    print(f"TRL {_trl_version()} GRPOTrainer ({trl[-1]['type']}, {trl[-1]['world']} processes): {t:.2f} "
          f"s/step  runs {[round(r['s_per_step'], 2) for r in trl]}")
    print("  phases (main process, median s): " + "; ".join(f"{k} {v:.2f}" for k,
                                                            v in trl[-1]["phases"].items()))
    print(f"  reward by step {trl[-1]['reward']}")
    for sharding, v in best.items():
        print(f"TRL s/step / rlvr ({sharding}) s/step: {t / v:.2f}x   (goal: rlvr >= 2x faster)")


def _trl_version() -> str:
    import trl

    return trl.__version__


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "rlvr":
        import torch

        torch.set_num_threads(1)
        sys.exit(rlvr_rank(sys.argv[2]))
    if len(sys.argv) > 2 and sys.argv[1] == "trl":
        trl_process(sys.argv[2])
        sys.exit(0)
    main()
