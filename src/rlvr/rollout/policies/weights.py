"""Weights that move from the trainer to a generation copy: the `vllm` engine, or the `hf` backend's own copy
in asynchronous mode (`train.max_staleness >= 1`), where rollouts of the next step are sampled while the
optimizer changes the trainer's weights in place.

A generation copy has a version (`generation_version`), which is what every completion it samples records;
it changes only through `sync_weights`, between generate calls, never in the middle of one.
"""
from __future__ import annotations

import copy
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.rollout.policies.trainable import TrainablePolicy


def trainer_weights(model: Any) -> list[tuple[str, Any]]:
    """(name, tensor) pairs of a transformers model as saved on disk; a peft model gives its merged
    weights."""
    if hasattr(model, "merge_adapter") and hasattr(model, "get_base_model"):
        model.merge_adapter()  # LoRA: the engine serves base + B @ A, which is what the trainer computes
        try:
            return [(k.replace(".base_layer", ""), v.detach().clone())
                    for k, v in model.get_base_model().state_dict().items() if ".lora_" not in k]
        finally:
            model.unmerge_adapter()
    return [(k, v.detach()) for k, v in model.state_dict().items()]


class GenerationCopy:
    """A frozen deep copy of a (not yet LoRA-wrapped) transformers model that generation uses instead of the
    trainer's, guarded by a lock that `generate` holds for a whole call and `load` for a whole copy."""

    def __init__(self, model: Any, version: int) -> None:
        import torch

        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.version = version
        self.lock = threading.RLock()
        self._torch = torch

    def load(self, pairs: list[tuple[str, Any]], version: int) -> None:
        """Copy (name, tensor) pairs in (names as `trainer_weights` gives them); an unknown name is an
        error."""
        own = self.model.state_dict()
        unknown = [k for k, _ in pairs if k not in own]
        if unknown:
            raise ValueError(f"weights the generation copy lacks: {unknown[:3]}")
        with self.lock, self._torch.no_grad():
            for k, v in pairs:
                own[k].copy_(v)
            self.version = version


def sync_generation(policy: TrainablePolicy) -> float | None:
    """Bring a policy's generation weights (vllm engine, hf copy) up to the trainer's when they are behind;
    seconds taken, or None when nothing had to move (no separate copy, or already current)."""
    if policy.generation_version == policy.version:
        return None
    return policy.sync_weights()


def snapshot(model: Any) -> list[tuple[str, Any]]:
    """The trainer's weights as owned (name, tensor) copies, safe to keep while the optimizer moves on."""
    return [(k, v.clone()) for k, v in trainer_weights(model)]
