"""Policy losses (per token) and their aggregations over a batch, as tables of named functions.

A loss maps the new, behaviour and (optionally) reference log-probs of the generated tokens and their
advantages to a per-token loss. An aggregation reduces per-token losses to the batch loss; it divides by
batch-level totals (not micro-batch ones), so accumulating gradients over micro-batches gives exactly the
gradient of the whole batch.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.errors import UserError


@dataclass(frozen=True)
class LossSettings:
    """Hyper-parameters shared by the losses."""

    clip_low: float = 0.2
    """Importance ratios below 1 - clip_low are clipped."""
    clip_high: float = 0.2
    """Importance ratios above 1 + clip_high are clipped (DAPO's clip-higher: above clip_low)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to the frozen reference (needs `ref_logp`)."""


@dataclass(frozen=True)
class TokenBatch:
    """Log-probs of the generated tokens of a (micro-)batch; every tensor is (sequences, positions)."""

    logp: Tensor
    """Log-probs under the policy being trained (carries the gradient)."""
    old_logp: Tensor
    """Log-probs under the behaviour policy that generated the tokens (stored with the episode)."""
    advantages: Tensor
    """One advantage per sequence, shape (sequences,)."""
    mask: Tensor
    """1.0 on tokens the model generated, 0.0 on prompt, tool output and padding."""
    ref_logp: Tensor | None = None
    """Log-probs under the frozen reference model, when a KL penalty is used."""
    is_weight: Tensor | None = None
    """Per-token weight of the surrogate, no gradient (decoupled PPO: truncated proximal / behaviour ratio; then
    `old_logp` holds the proximal log-probs). None: 1."""


LossFn = Callable[[TokenBatch, LossSettings], tuple[Tensor, dict[str, Tensor]]]
"""(batch, settings) -> (per-token loss, per-token statistics to report)."""


def _kl_k3(batch: TokenBatch) -> Tensor:
    """Schulman's k3 estimator of KL(policy || reference): exp(d) - d - 1 with d = ref - new; always >= 0."""
    d = batch.ref_logp - batch.logp  # type: ignore[operator]  (callers check ref_logp)
    return torch.exp(d) - d - 1.0


def _with_kl(loss: Tensor, stats: dict[str, Tensor], batch: TokenBatch, s: LossSettings) -> tuple[Tensor, dict]:
    if s.kl_coef > 0:
        if batch.ref_logp is None:
            raise ValueError("kl_coef > 0 needs reference log-probs")
        kl = _kl_k3(batch)
        stats["kl"] = kl.detach()
        loss = loss + s.kl_coef * kl
    return loss, stats


def _weighted(loss: Tensor, batch: TokenBatch) -> Tensor:
    return loss if batch.is_weight is None else loss * batch.is_weight.detach()


def ppo_clip(batch: TokenBatch, s: LossSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate with separate low/high clip ranges (DAPO clip-higher when clip_high > clip_low):
    -min(ratio * A, clip(ratio, 1 - low, 1 + high) * A)."""
    ratio = torch.exp(batch.logp - batch.old_logp)
    adv = batch.advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - s.clip_low, 1.0 + s.clip_high) * adv
    loss = _weighted(-torch.minimum(unclipped, clipped), batch)
    stats = {"clip_frac": (clipped < unclipped).float().detach(), "ratio": ratio.detach()}
    return _with_kl(loss, stats, batch, s)


def policy_gradient(batch: TokenBatch, s: LossSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """The plain importance-weighted policy gradient, -ratio * A, without clipping (REINFORCE when the data
    is on-policy: its gradient is then -A * grad log p)."""
    ratio = torch.exp(batch.logp - batch.old_logp)
    loss = _weighted(-ratio * batch.advantages.unsqueeze(-1), batch)
    return _with_kl(loss, {"ratio": ratio.detach()}, batch, s)


LOSSES: dict[str, LossFn] = {"ppo_clip": ppo_clip, "pg": policy_gradient}
"""Loss name (`train.loss`) -> per-token loss function."""


@dataclass(frozen=True)
class BatchTotals:
    """Normalisers of the whole batch, fixed before it is split into micro-batches."""

    tokens: float
    """Generated tokens in the batch."""
    sequences: float
    """Sequences in the batch."""
    norm_length: float = 1.0
    """The constant length of the `constant` aggregation (Dr. GRPO)."""


AggregateFn = Callable[[Tensor, Tensor, BatchTotals], Tensor]
"""(per-token loss, mask, batch totals) -> this micro-batch's share of the batch loss."""


def token_mean(loss: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """Every generated token of the batch weighs the same (DAPO)."""
    return (loss * mask).sum() / max(totals.tokens, 1.0)


def sequence_mean(loss: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """Mean over each sequence's tokens, then over sequences (the original GRPO)."""
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq.sum() / max(totals.sequences, 1.0)


def constant_norm(loss: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """Sum over tokens divided by sequences x a constant length: no length bias (Dr. GRPO)."""
    return (loss * mask).sum() / max(totals.sequences * totals.norm_length, 1.0)


AGGREGATIONS: dict[str, AggregateFn] = {"token": token_mean, "sequence": sequence_mean, "constant": constant_norm}
"""Aggregation name (`train.aggregation`) -> function."""


def loss_fn(name: str) -> LossFn:
    """The loss called `name`; an unknown name is a UserError listing the known ones."""
    if name not in LOSSES:
        raise UserError(f"unknown loss {name!r}", field="train.loss", fix=f"use one of {', '.join(sorted(LOSSES))}")
    return LOSSES[name]


def aggregate_fn(name: str) -> AggregateFn:
    """The aggregation called `name`; an unknown name is a UserError listing the known ones."""
    if name not in AGGREGATIONS:
        raise UserError(f"unknown loss aggregation {name!r}", field="train.aggregation",
                        fix=f"use one of {', '.join(sorted(AGGREGATIONS))}")
    return AGGREGATIONS[name]
