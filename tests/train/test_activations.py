"""Activation checkpointing (rlvr.train.activations) gives the same gradients, in the update, with LoRA and in
SFT, keeps parameter names, and leaves a deep copy its own blocks. (On 2 FSDP2 and DDP ranks:
tests/train/test_logprobs.py.)"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from tests.train.test_logprobs import assert_rel, assert_trained, llama
from tests.train.test_packing import episodes

from rlvr.config import TrainConfig
from rlvr.train.activations import activation_checkpointing_enabled, enable_activation_checkpointing
from rlvr.train.distributed import transformer_blocks
from rlvr.train.update import BatchTotals, PolicyUpdater


def update_grads(model, cfg: TrainConfig) -> dict[str, torch.Tensor]:
    upd = PolicyUpdater(model, cfg, pad_id=0, temperature=0.8)
    chunk = episodes(5, seed=2)
    totals = BatchTotals(tokens=float(sum(sum(s.loss_mask) for s in chunk)), sequences=float(len(chunk)))
    for micro, _ in upd.micro_batches(chunk):
        loss, _ = upd.micro_loss(micro, totals)
        loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("train", [{}, {"micro_batch_tokens": 100}, {"lora": True}])
def test_checkpointed_blocks_give_the_same_gradients(train: dict) -> None:
    def model():
        m = llama()
        if train.get("lora"):
            from peft import LoraConfig, get_peft_model

            m = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                             init_lora_weights=False))
        return m

    plain = update_grads(model(), TrainConfig(**train))
    ac_model = model()
    names = [n for n, _ in ac_model.named_parameters()]
    checked = update_grads(ac_model, TrainConfig(activation_checkpointing=True, **train))
    assert activation_checkpointing_enabled(ac_model)
    assert [n for n, _ in ac_model.named_parameters()] == names  # no renamed parameters
    assert plain.keys() == checked.keys() and plain
    assert_trained(plain)
    for name in plain:
        assert_rel(checked[name], plain[name], 1e-5)


def test_blocks_save_only_their_inputs() -> None:
    """With checkpointing, far fewer tensors are kept for the backward pass."""
    def saved(model) -> int:
        count = [0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            count[0] += t.numel()
            return t

        ids = torch.randint(0, 97, (1, 64))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids, use_cache=False).logits.sum()
        return count[0]

    model = llama()
    before = saved(model)
    enable_activation_checkpointing(model)
    assert enable_activation_checkpointing(model) == 0  # idempotent
    assert saved(model) < before


def test_sft_with_checkpointing_gives_the_same_gradients(tiny_policy) -> None:
    from rlvr.train.sft import SFTExample, encode, sft_loss

    batch = [encode(tiny_policy, SFTExample("add 2 and 3", "5"), 64),
             encode(tiny_policy, SFTExample("reverse abc", "cba"), 64)]
    model = tiny_policy.model

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        sft_loss(model, batch, tiny_policy.pad_id).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    enable_activation_checkpointing(model)
    checked = grads()
    assert_trained(plain)
    for name in plain:
        assert_rel(checked[name], plain[name], 1e-5)


def test_a_deep_copy_runs_its_own_blocks(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    enable_activation_checkpointing(model)
    clone = copy.deepcopy(model)
    for a, b in zip(transformer_blocks(model), transformer_blocks(clone)):
        assert b.forward.__self__ is b and a.forward.__self__ is a
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(1.0)
    ids = torch.randint(0, model.config.vocab_size, (1, 12))
    with torch.no_grad():
        assert not torch.allclose(model(input_ids=ids).logits, clone(input_ids=ids).logits)
