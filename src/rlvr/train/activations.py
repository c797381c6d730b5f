"""Activation checkpointing per transformer block (`train.activation_checkpointing`).

Each block keeps only its input for the backward pass and recomputes its inside then, so the activations
held across a long episode are one hidden state per block instead of a dozen. transformers' own
`gradient_checkpointing_enable` only acts in training mode, and rlvr keeps the policy in eval mode (no
dropout, so importance ratios compare the same deterministic function); torch's `checkpoint_wrapper` renames
every parameter (`_checkpoint_wrapped_module`), which would change state dicts and checkpoints. So the
block's own `forward` is wrapped in place: the module tree, the parameter names and the hooks that FSDP2, DDP
and peft put around the block's call stay as they are, and the recompute runs inside them (FSDP2 has gathered
the block's weights again for its backward when the recompute needs them).
"""
from __future__ import annotations

import types

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from rlvr.train.distributed import transformer_blocks, unwrapped

_WRAPPED = "_rlvr_checkpointed_forward"


def enable_activation_checkpointing(model: nn.Module) -> int:
    """Checkpoint every transformer block of `model` (plain, peft, DDP or FSDP2-wrapped); idempotent.
    Returns the number of blocks wrapped now. Without gradients (the proximal and reference passes,
    generation) a block runs as before."""
    wrapped = 0
    for block in transformer_blocks(unwrapped(model)):
        if getattr(block, _WRAPPED, False):
            continue
        # A method bound to the block (not a closure over it), so a deep copy of the model (the generation
        # copy)
        # rebinds it to the copied block.
        block.forward = types.MethodType(_checkpointed_forward, block)
        setattr(block, _WRAPPED, True)
        wrapped += 1
    return wrapped


def _checkpointed_forward(self: nn.Module, *args, **kwargs):
    inner = type(self).forward.__get__(self)  # the class's forward (FSDP2's subclass of the block's included)
    if not torch.is_grad_enabled():
        return inner(*args, **kwargs)
    kwargs.pop("use_cache", None)  # a cache written twice (forward and recompute) would be wrong
    return checkpoint(inner, *args, use_reentrant=False, **kwargs)


def activation_checkpointing_enabled(model: nn.Module) -> bool:
    """Whether every transformer block of `model` is checkpointed."""
    blocks = transformer_blocks(unwrapped(model))
    return bool(blocks) and all(getattr(b, _WRAPPED, False) for b in blocks)
