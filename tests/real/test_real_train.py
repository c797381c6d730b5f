"""One GRPO step with LoRA on the real model: the update moves the adapters only, in the direction of the
advantages (the rewarded sample's tokens become likelier relative to the unrewarded one's)."""
from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import MonitorConfig, PolicyConfig, RunConfig, SFTConfig, TasksConfig, TrainConfig
from rlvr.run import build_trainer
from rlvr.tasks.selection import resolve
from rlvr.train.loop import update_policy

pytestmark = pytest.mark.real


def mean_logprob(model, ep) -> float:
    from rlvr.rollout.policies.hf import sequence_logprobs

    lps = sequence_logprobs(model, ep.token_ids)
    gen = [lp for lp, m in zip(lps, ep.loss_mask) if m]
    return sum(gen) / len(gen)


def test_one_grpo_step_with_lora_on_the_real_model(real_dir, tmp_path) -> None:
    cfg = RunConfig(name="real-lora", output_dir=str(tmp_path),
                    tasks=TasksConfig(train="rg-basic_arithmetic", heldout=""),
                    policy=PolicyConfig(model=str(real_dir), device="cpu", max_context=512,
                                        max_new_tokens=16),
                    # answers cut at 16 tokens are trained on as they stand (their rewards are set by hand)
                    train=TrainConfig(lora=True, lora_rank=8, lr=2e-3, batch_size=1, micro_batch_size=4,
                                      truncation="score"),
                    sft=SFTConfig(enabled=False), monitor=MonitorConfig(tensorboard=False, report=False))
    with build_trainer(cfg, str(tmp_path / "real-lora")) as trainer:
        model = trainer.policy.model
        assert type(model).__name__ == "PeftModelForCausalLM"
        lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
        assert lora and all("lora_" in n for n in lora)
        episodes = trainer.rollouts.run(resolve("rg-basic_arithmetic:1", seed=3), 2, step=0, seed=3)
        assert all(ep.num_generated_tokens > 0 and not ep.masked for ep in episodes)
        for ep, reward in zip(episodes, (1.0, 0.0)):  # a signal the model cannot earn yet: made by hand
            ep.reward = reward
        model.eval()
        before = [mean_logprob(model, ep) for ep in episodes]
        metrics = update_policy(trainer, episodes, 0)
        model.eval()
        after = [mean_logprob(model, ep) for ep in episodes]
    assert trainer.policy.version == 1 and metrics["train/skipped_groups"] == 0.0
    assert all(math.isfinite(v) for v in metrics.values())
    params = dict(model.named_parameters())
    assert any(not torch.equal(params[n], v) for n, v in lora.items())  # the adapters moved
    assert all(torch.equal(params[n], v) for n, v in base.items())  # the base weights did not
    assert (after[0] - before[0]) - (after[1] - before[1]) > 0, (before, after)
