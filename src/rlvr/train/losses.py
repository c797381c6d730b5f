"""Policy losses (per token) and their aggregations over a batch, as tables of named functions.

A loss maps the new, behaviour and (optionally) reference log-probs of the generated tokens and their
advantages to a per-token loss. An aggregation reduces per-token losses to the batch loss; it divides by
batch-level totals (not micro-batch ones), so accumulating gradients over micro-batches gives exactly the
gradient of the whole batch. A behaviour correction (`IS_CORRECTIONS`, at a level of `IS_LEVELS`) turns the
sampler/trainer ratio into the per-token weight of the decoupled surrogate.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor

from rlvr.errors import UserError


@dataclass(frozen=True)
class LossSettings:
    """Hyper-parameters shared by the losses."""

    clip_low: float = 0.2
    """Importance ratios below 1 - clip_low are clipped (the token ratio of ppo_clip and cispo, the sequence
    ratio of gspo)."""
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
    """Per token, shape (sequences, positions) (a sequence's tokens share its episode's advantage, or each
    turn has its own: `train.turn_baseline`); one per sequence, shape (sequences,), is taken as that on every
    token."""
    mask: Tensor
    """1.0 on tokens the model generated, 0.0 on prompt, tool output and padding."""
    ref_logp: Tensor | None = None
    """Log-probs under the frozen reference model, when a KL penalty is used."""
    is_weight: Tensor | None = None
    """Per-token weight of the surrogate, no gradient (decoupled PPO: truncated proximal / behaviour ratio;
    then `old_logp` holds the proximal log-probs). None: 1."""


LossFn = Callable[[TokenBatch, LossSettings], tuple[Tensor, dict[str, Tensor]]]
"""(batch, settings) -> (per-token loss, per-token statistics to report)."""


def _kl_k3(batch: TokenBatch) -> Tensor:
    """Schulman's k3 estimator of KL(policy || reference): exp(d) - d - 1 with d = ref - new; always >= 0."""
    d = batch.ref_logp - batch.logp  # type: ignore[operator]  (callers check ref_logp)
    return torch.exp(d) - d - 1.0


def _with_kl(loss: Tensor, stats: dict[str, Tensor], batch: TokenBatch, s: LossSettings) -> tuple[Tensor,
                                                                                                  dict]:
    if s.kl_coef > 0:
        if batch.ref_logp is None:
            raise ValueError("kl_coef > 0 needs reference log-probs")
        kl = _kl_k3(batch)
        stats["kl"] = kl.detach()
        loss = loss + s.kl_coef * kl
    return loss, stats


def token_advantages(batch: TokenBatch) -> Tensor:
    """The batch's advantages per token, shape (sequences, positions) or broadcastable to it."""
    adv = batch.advantages
    return adv if adv.dim() == 2 else adv.unsqueeze(-1)


def sequence_advantages(batch: TokenBatch) -> Tensor:
    """One advantage per sequence: the mean over its generated tokens of per-token advantages."""
    adv = batch.advantages
    if adv.dim() == 1:
        return adv
    return (adv * batch.mask).sum(-1) / batch.mask.sum(-1).clamp(min=1.0)


def _weighted(loss: Tensor, batch: TokenBatch) -> Tensor:
    return loss if batch.is_weight is None else loss * batch.is_weight.detach()


def ppo_clip(batch: TokenBatch, s: LossSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate with separate low/high clip ranges (DAPO clip-higher when clip_high >
    clip_low): -min(ratio * A, clip(ratio, 1 - low, 1 + high) * A)."""
    ratio = torch.exp(batch.logp - batch.old_logp)
    adv = token_advantages(batch)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - s.clip_low, 1.0 + s.clip_high) * adv
    loss = _weighted(-torch.minimum(unclipped, clipped), batch)
    stats = {"clip_frac": (clipped < unclipped).float().detach(), "ratio": ratio.detach()}
    return _with_kl(loss, stats, batch, s)


def policy_gradient(batch: TokenBatch, s: LossSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """The plain importance-weighted policy gradient, -ratio * A, without clipping (REINFORCE when the data
    is on-policy: its gradient is then -A * grad log p)."""
    ratio = torch.exp(batch.logp - batch.old_logp)
    loss = _weighted(-ratio * token_advantages(batch), batch)
    return _with_kl(loss, {"ratio": ratio.detach()}, batch, s)


def gspo(batch: TokenBatch, s: LossSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv:2507.18071): one ratio per
    sequence, the geometric mean of its token ratios, s_i = exp(mean_t (log pi(y_t) - log pi_old(y_t))) over
    the sequence's generated tokens, clipped at the sequence level:

        loss_i = -min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i),

    given to each of the sequence's tokens, so `aggregation = "sequence"` is the paper's mean over sequences.
    Its gradient is the paper's: -A_i * s_i * mean_t grad log pi(y_t), zero for a clipped sequence (equal to
    GSPO-token's, sg[s_i] * pi(y_t) / sg[pi(y_t)], when advantages are per sequence, as here). On-policy
    (s_i = 1) its gradient is the plain policy gradient's under any aggregation. The paper clips far tighter
    than PPO: clip_low 3e-4, clip_high 4e-4."""
    log_ratio = (batch.logp - batch.old_logp) * batch.mask
    seq_ratio = torch.exp(log_ratio.sum(-1) / batch.mask.sum(-1).clamp(min=1.0))
    adv = sequence_advantages(batch)
    unclipped = seq_ratio * adv
    clipped = torch.clamp(seq_ratio, 1.0 - s.clip_low, 1.0 + s.clip_high) * adv
    per_seq = -torch.minimum(unclipped, clipped)
    loss = _weighted(per_seq.unsqueeze(-1).expand_as(batch.logp), batch)
    stats = {"clip_frac": (clipped < unclipped).float().detach().unsqueeze(-1).expand_as(batch.logp),
             "ratio": seq_ratio.detach().unsqueeze(-1).expand_as(batch.logp)}
    return _with_kl(loss, stats, batch, s)


def cispo(batch: TokenBatch, s: LossSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO (MiniMax 2025, "MiniMax-M1", arXiv:2506.13585): the importance weight is clipped and its gradient
    stopped, and it multiplies the log-prob, so every token keeps its gradient (PPO's clip drops clipped
    tokens):

        loss_t = -sg[clip(r_t, 1 - clip_low, 1 + clip_high)] * A * log pi(y_t),   r_t = pi(y_t) / pi_old(y_t).

    Its gradient is -clip(r_t) * A * grad log pi(y_t): on-policy (r = 1) the plain policy gradient. MiniMax
    leaves the lower bound open in effect (clip_low 1.0: weights in [0, 1 + clip_high]) and tunes clip_high;
    the paper uses token-level aggregation (`aggregation = "token"`)."""
    ratio = torch.exp(batch.logp - batch.old_logp)
    low, high = 1.0 - s.clip_low, 1.0 + s.clip_high
    weight = torch.clamp(ratio, low, high).detach()
    loss = _weighted(-weight * token_advantages(batch) * batch.logp, batch)
    stats = {"clip_frac": ((ratio < low) | (ratio > high)).float().detach(), "ratio": ratio.detach()}
    return _with_kl(loss, stats, batch, s)


LOSSES: dict[str, LossFn] = {"ppo_clip": ppo_clip, "pg": policy_gradient, "gspo": gspo, "cispo": cispo}
"""Loss name (`train.loss`) -> per-token loss function."""


@dataclass(frozen=True)
class PaperDefaults:
    """What a loss's paper uses, where `train.clip_low`, `clip_high` and `aggregation` are left unset."""

    clip_low: float
    clip_high: float
    aggregation: str
    differs: str = ""
    """One line: where rlvr's default differs from the paper (and why), or "" when it does not."""


PAPER_DEFAULTS: dict[str, PaperDefaults] = {
    # PPO (Schulman et al. 2017): epsilon 0.2 both ways; GRPO/DAPO's token mean
    "ppo_clip": PaperDefaults(0.2, 0.2, "token"),
    "pg": PaperDefaults(0.2, 0.2, "token", "no clipping: the clip ranges are unused"),
    # GSPO paper (v2) section 5.1: sequence-level clip 3e-4 / 4e-4, the mean over sequences
    "gspo": PaperDefaults(3e-4, 4e-4, "sequence"),
    # MiniMax-M1: no lower bound on the weight (clip_low 1: weights in [0, 1 + clip_high]), token-level mean
    "cispo": PaperDefaults(1.0, 4.0, "token",
                           "MiniMax-M1 tunes the upper bound without giving it: ScaleRL's epsilon_max 5 "
                           "(clip_high 4.0, TRL's recommended value)"),
}
"""Loss name -> its paper's clip ranges and aggregation: what an unset `train.clip_low`, `clip_high` or
`aggregation` means for that loss."""


def paper_defaults(name: str) -> PaperDefaults:
    """The paper defaults of the loss called `name` (an unknown name is a UserError, as for `loss_fn`)."""
    return named(PAPER_DEFAULTS, name, "loss", "train.loss")


# ------------------------------------------------------------------------------------ behaviour correction
@dataclass(frozen=True)
class CorrectionSettings:
    """How the sampler/trainer ratio rho = pi_trainer / pi_behaviour becomes the surrogate's weight."""

    level: str = "token"
    """A key of IS_LEVELS: the ratio of each token, or one per sequence."""
    cap: float = 2.0
    """TIS: weights are truncated at this value (C)."""
    low: float = 0.5
    """MIS: ratios below this are dropped."""
    high: float = 2.0
    """MIS: ratios above this are dropped."""


LevelFn = Callable[[Tensor, Tensor], Tensor]
"""(per-token log rho, mask) -> log rho at this level, one value per token (a sequence's broadcast to its
tokens)."""


def token_level(log_rho: Tensor, mask: Tensor) -> Tensor:
    """Each token's own ratio rho_t."""
    return log_rho


def sequence_level(log_rho: Tensor, mask: Tensor) -> Tensor:
    """The sequence's ratio, the product of its token ratios: the exact importance weight of the whole
    sequence (verl's `sequence` level; it grows with length: a small per-token mismatch compounds)."""
    return (log_rho * mask).sum(-1, keepdim=True).expand_as(log_rho)


def geometric_level(log_rho: Tensor, mask: Tensor) -> Tensor:
    """The geometric mean of the sequence's token ratios: length-normalised (ms-swift's sequence level, verl's
    and prime-rl's `geometric` rejection; it is not an unbiased importance weight: use it to mask, with a
    tight band)."""
    return ((log_rho * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1).expand_as(log_rho)


IS_LEVELS: dict[str, LevelFn] = {"token": token_level, "sequence": sequence_level,
                                 "geometric": geometric_level}
"""Level name (`train.is_level`) -> function."""

CorrectionFn = Callable[[Tensor, CorrectionSettings], tuple[Tensor | None, dict[str, Tensor]]]
"""(rho at the chosen level, settings) -> (per-token weight of the surrogate or None for none, per-token
stats)."""

MAX_LOG_RHO = 50.0
"""Log-ratios are clamped here before exp, so a long sequence's product stays finite (e^50 is far past any
cap)."""


def truncated_is(rho: Tensor, c: CorrectionSettings) -> tuple[Tensor | None, dict[str, Tensor]]:
    """TIS, truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
    Off-Policy RL Training"; verl `rollout_is`, ms-swift `*_truncate`): w = min(rho, C). Every token is kept;
    a token (or sequence) the sampler liked far less than the trainer counts at most C times."""
    weight = rho.clamp(max=c.cap)
    return weight, {"is_weight": weight, "is_truncated": (rho > c.cap).float()}


def masked_is(rho: Tensor, c: CorrectionSettings) -> tuple[Tensor | None, dict[str, Tensor]]:
    """MIS, masked importance sampling (Liu, Li et al. 2025, "When Speed Kills Stability"; ms-swift `*_mask`,
    prime-rl's `token_mask_low/high`, verl's rejection sampling `rollout_rs` with its IS weight):
    w = rho if low <= rho <= high else 0. Tokens (or whole sequences) outside the band are dropped instead of
    truncated, so a badly mismatched token contributes no biased gradient at all."""
    keep = (rho >= c.low) & (rho <= c.high)
    weight = torch.where(keep, rho, torch.zeros_like(rho))
    return weight, {"is_weight": weight, "is_masked": (~keep).float()}


def no_correction(rho: Tensor, c: CorrectionSettings) -> tuple[Tensor | None, dict[str, Tensor]]:
    """No weight: the ratio is clipped against the recomputed trainer log-probs and the sampler is ignored."""
    return None, {}


IS_CORRECTIONS: dict[str, CorrectionFn] = {"tis": truncated_is, "mis": masked_is, "none": no_correction}
"""Correction name (`train.is_correction`) -> function."""


def behaviour_weight(trainer_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, correction: str,
                     c: CorrectionSettings) -> tuple[Tensor | None, dict[str, Tensor]]:
    """The decoupled surrogate's weight from the trainer's log-probs at the start of the update (the proximal
    policy) and the sampler's, at `c.level` (verl "rollout correction": rho = pi_old / pi_rollout)."""
    log_rho = IS_LEVELS[c.level]((trainer_logp - behaviour_logp) * mask, mask)
    rho = torch.exp(log_rho.clamp(-MAX_LOG_RHO, MAX_LOG_RHO))
    return IS_CORRECTIONS[correction](rho, c)


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


AGGREGATIONS: dict[str, AggregateFn] = {"token": token_mean, "sequence": sequence_mean,
                                        "constant": constant_norm}
"""Aggregation name (`train.aggregation`) -> function."""


_T = TypeVar("_T")


def named(table: Mapping[str, _T], name: str, what: str, field: str) -> _T:
    """`table[name]`; an unknown name is a one-line UserError naming the field, with "did you mean"."""
    if name in table:
        return table[name]
    close = difflib.get_close_matches(name, list(table), n=1, cutoff=0.5)
    known = ", ".join(sorted(table))
    fix = f"did you mean {close[0]!r}? known: {known}" if close else f"use one of {known}"
    raise UserError(f"unknown {what} {name!r}", field=field, fix=fix)


def loss_fn(name: str) -> LossFn:
    """The loss called `name`; an unknown name is a UserError listing the known ones."""
    return named(LOSSES, name, "loss", "train.loss")


def aggregate_fn(name: str) -> AggregateFn:
    """The aggregation called `name`; an unknown name is a UserError listing the known ones."""
    return named(AGGREGATIONS, name, "loss aggregation", "train.aggregation")
