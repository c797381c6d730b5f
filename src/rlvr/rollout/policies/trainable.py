"""TrainablePolicy: what the trainer and the env loop need from a policy beyond `Policy.generate`.

A trainable policy holds local weights (`model`, a torch module the trainer updates in place and may wrap
with LoRA adapters), the tokenizer that made its token records, and optionally a separate generation copy
of its weights (the vllm engine; the hf backend in asynchronous mode) with its own version. The `hf` and
`vllm` backends implement it; `openai` and `scripted` do not, and `require_trainable` says so in one line.
"""
from __future__ import annotations

import inspect
from typing import Any, Protocol

from rlvr.errors import UserError
from rlvr.rollout.policy import Policy


class TrainablePolicy(Policy, Protocol):
    """A Policy with local weights the trainer can update."""

    model: Any
    """The torch module being trained (the trainer may replace it with a LoRA-wrapped one)."""
    tokenizer: Any
    """The Hugging Face tokenizer behind the token records (saved with the final model)."""
    pad_id: int
    eos_ids: frozenset[int]
    """Token ids that end a turn."""
    max_context: int

    @property
    def generation_version(self) -> int:
        """Version of the weights that generate now: a separate copy's, else `version`."""
        ...

    def separate_weights(self) -> None:
        """Generate from a copy of the weights from now on (asynchronous mode)."""
        ...

    def sync_weights(self, weights: Any = None, version: int | None = None) -> float | None:
        """Load (name, tensor) pairs (default: the trainer's own weights) into the generation copy;
        seconds."""
        ...


_MEMBERS = ("version", "generate", "model", "tokenizer", "pad_id", "eos_ids", "max_context",
            "generation_version",
            "separate_weights", "sync_weights")
_MISSING = object()


def is_trainable(policy: Any) -> bool:
    """Whether `policy` has every member of TrainablePolicy. Looked up statically, so that checking never
    runs a property (the vllm backend loads its trainer-side model on first access of `model`)."""
    return all(inspect.getattr_static(policy, name, _MISSING) is not _MISSING for name in _MEMBERS)


def generation_version(policy: Policy) -> int:
    """The version that samples the next turn (a policy without a generation copy has just `version`)."""
    return policy.generation_version if is_trainable(policy) else policy.version  # type: ignore[attr-defined]


def require_trainable(policy: Policy, backend: str) -> TrainablePolicy:
    """`policy` as a TrainablePolicy, or a one-line error naming the backend and the fix."""
    if not is_trainable(policy):
        raise UserError(f"the {backend!r} backend cannot be trained: it holds no local weights",
                        field="policy.backend",
                        fix='use backend = "hf" or "vllm" (openai can only be evaluated)')
    return policy  # type: ignore[return-value]
