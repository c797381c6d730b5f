"""The policy update: turn scored episodes into AdamW steps on any transformers causal LM.

Every step also measures the sampler/trainer mismatch and the policy's entropy on the generated tokens, under
the weights at the start of the update (`mismatch/*`, `policy/entropy`; see `mismatch_metrics`)."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rlvr.config import SFTConfig, TrainConfig
from rlvr.errors import UserError
from rlvr.rollout.episode import Episode
from rlvr.train.activations import enable_activation_checkpointing
from rlvr.train.advantages import turn_spans
from rlvr.train.distributed import COMPUTE_DTYPES, SINGLE, Dist, casts_itself, unwrapped
from rlvr.train.logprobs import TokenScores, token_scores
from rlvr.train.losses import (
    IS_CORRECTIONS,
    IS_LEVELS,
    MAX_LOG_RHO,
    BatchTotals,
    CorrectionSettings,
    LossSettings,
    TokenBatch,
    aggregate_fn,
    behaviour_weight,
    loss_fn,
    named,
    paper_defaults,
)
from rlvr.train.packing import Layout, can_pack, packed, padded, token_micro_batches, unpack


@dataclass(frozen=True)
class Sample:
    """One episode reduced to what the update needs."""

    token_ids: list[int]
    """The whole conversation as the model saw it."""
    loss_mask: list[int]
    """1 on generated tokens."""
    logprobs: list[float]
    """Behaviour log-prob of each generated token (0.0 elsewhere)."""
    advantage: float
    """The episode's advantage."""
    proximal: list[float] | None = None
    """Decoupled PPO: log-prob of each token under the weights at the start of the update (0.0 elsewhere)."""
    token_advantages: list[float] | None = None
    """Per position, when turns have their own advantages (`train.turn_baseline`); None: `advantage` on every
    token."""


def samples_from(episodes: Sequence[Episode], advantages: dict[str, float],
                 turns: dict[str, list[float]] | None = None) -> list[Sample]:
    """The episodes that have an advantage and at least one generated token, as update samples. With `turns`
    (`rlvr.train.advantages.turn_advantages`) each generated turn's tokens carry their turn's advantage."""
    out: list[Sample] = []
    for ep in episodes:
        if ep.episode_id not in advantages or not any(ep.loss_mask):
            continue
        if not (len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)):
            raise ValueError(f"episode {ep.episode_id}: token_ids, loss_mask and logprobs differ in length")
        per_token = None
        if turns is not None and ep.episode_id in turns:
            per_token = [0.0] * len(ep.token_ids)
            own = turns[ep.episode_id]
            for k, (a, b) in enumerate(turn_spans(ep.loss_mask)):
                per_token[a:b] = [own[min(k, len(own) - 1)]] * (b - a)
        out.append(Sample(list(ep.token_ids), list(ep.loss_mask), list(ep.logprobs),
                          advantages[ep.episode_id], token_advantages=per_token))
    return out


def next_token_logits(model: nn.Module, input_ids: Tensor, attention_mask: Tensor,
                      temperature: float) -> Tensor:
    """Logits of the next token after each position, shape (B, T - 1, V), divided by the sampling
    temperature."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    if temperature > 0:
        logits = logits / temperature  # the distribution the tokens were sampled from
    return logits


def gathered_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """Log-prob of each token of `input_ids` under `next_token_logits`, shape (B, T); position 0 gets 0."""
    logp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(logp, (1, 0))


def token_logprobs(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, temperature: float) -> Tensor:
    """Log-prob of each token given its prefix, shape (B, T); position 0 (no prefix) gets 0. Computed over
    chunks of positions (rlvr.train.logprobs): the (B, T, V) logits are never built."""
    return token_scores(model, input_ids, attention_mask, temperature).logp


ENTROPY_CHUNK = {"cpu": 1 << 20, "cuda": 1 << 26}
"""Logits whose entropy is computed at once, per device type: about 4 MB on a CPU, so that each chunk stays in
cache; larger on a GPU. It also bounds the extra memory of the entropy."""


@torch.no_grad()
def generated_entropy(logits: Tensor, mask: Tensor) -> Tensor:
    """Entropy (nats) of the distribution each generated token was drawn from, one value per generated token
    (`logits` from `next_token_logits`: position t predicts token t + 1). The update computes it with the
    log-probs, chunk by chunk (rlvr.train.logprobs); this is the same from whole logits."""
    flat = logits.detach().reshape(-1, logits.shape[-1])
    positions = mask[:, 1:].reshape(-1).nonzero().squeeze(-1)
    rows = max(1, ENTROPY_CHUNK.get(logits.device.type, ENTROPY_CHUNK["cuda"]) // logits.shape[-1])
    parts = []
    for chunk in positions.split(rows):
        logp = torch.log_softmax(flat.index_select(0, chunk), dim=-1)
        parts.append(-(logp.exp() * logp).sum(-1))
    return torch.cat(parts) if parts else flat.new_zeros(0)


MISMATCH_QUANTILES = {"p5": 0.05, "p50": 0.5, "p95": 0.95}
"""Quantiles of the sampler/trainer ratio logged every step (`mismatch/ratio_<name>`)."""


def mismatch_metrics(log_rho: Tensor, entropy: Tensor) -> dict[str, float]:
    """The step's mismatch and entropy figures from the generated tokens' log rho = log pi_trainer - log
    pi_sampler and the trainer's entropy at each of them (flat tensors over the batch's generated tokens).

    `mismatch/kl` is the k3 estimate of KL(sampler || trainer) per token, mean(rho - 1 - log rho) over the
    sampler's tokens (verl's and ms-swift's `k3_kl`, prime-rl's `mismatch_kl`): always >= 0, 0 exactly when
    the two agree on every token. `mismatch/ratio_*` are quantiles of the token ratio rho, `policy/entropy`
    the mean entropy per generated token."""
    out: dict[str, float] = {}
    if log_rho.numel():
        lr = log_rho.double().clamp(-MAX_LOG_RHO, MAX_LOG_RHO)
        rho = torch.exp(lr)
        out["mismatch/kl"] = float((rho - 1.0 - lr).mean())
        arr = rho.numpy()
        out.update({f"mismatch/ratio_{k}": float(np.quantile(arr, q)) for k, q in MISMATCH_QUANTILES.items()})
        out["mismatch/ratio_min"], out["mismatch/ratio_max"] = float(arr.min()), float(arr.max())
    if entropy.numel():
        out["policy/entropy"] = float(entropy.double().mean())
    return out


class MismatchProbe:
    """Collects the generated tokens' log rho and entropy over a step's micro-batches, for
    `mismatch_metrics`."""

    def __init__(self) -> None:
        self.log_rho: list[Tensor] = []
        self.entropy: list[Tensor] = []

    def add(self, trainer_logp: Tensor, behaviour_logp: Tensor, entropy: Tensor, mask: Tensor) -> None:
        keep = mask.bool()
        self.log_rho.append((trainer_logp.detach() - behaviour_logp)[keep].float().cpu())
        self.entropy.append(entropy.float().cpu())

    def metrics(self, dist: Dist = SINGLE) -> dict[str, float]:
        """The figures over every rank's tokens (a collective when `dist` is active: call it on every
        rank)."""
        parts = [(self.log_rho, self.entropy)] if not dist.active else dist.all_gather((self.log_rho,
                                                                                        self.entropy))
        log_rho = [t for rank_rho, _ in parts for t in rank_rho]
        entropy = [t for _, rank_entropy in parts for t in rank_entropy]
        if not log_rho:
            return {}
        return mismatch_metrics(torch.cat(log_rho), torch.cat(entropy))


def correction_settings(cfg: TrainConfig) -> tuple[str, CorrectionSettings]:
    """The decoupled correction's name and settings. Unknown names are UserErrors with "did you mean"; so is a
    correction other than the default without `off_policy = "decoupled"` (it needs the trainer's recomputed
    log-probs, which only the decoupled update computes), rather than a setting silently ignored."""
    named(IS_CORRECTIONS, cfg.is_correction, "importance-sampling correction", "train.is_correction")
    named(IS_LEVELS, cfg.is_level, "importance-sampling level", "train.is_level")
    if cfg.off_policy != "decoupled":
        for key, value, default in (("is_correction", cfg.is_correction, "tis"),
                                    ("is_level", cfg.is_level, "token")):
            if value != default:
                raise UserError(f"{value!r} needs the trainer's recomputed log-probs", field=f"train.{key}",
                                fix=f'set train.off_policy = "decoupled", or leave train.{key} at '
                                    f'{default!r}')
    return cfg.is_correction, CorrectionSettings(level=cfg.is_level, cap=cfg.is_cap, low=cfg.is_mask_low,
                                                 high=cfg.is_mask_high)


def collate(samples: Sequence[Sample], pad_id: int, device: torch.device) -> dict[str, Tensor]:
    """Right-padded tensors of a micro-batch."""
    width = max(len(s.token_ids) for s in samples)

    def padded(rows: list[list], fill: float, dtype: torch.dtype) -> Tensor:
        return torch.tensor([r + [fill] * (width - len(r)) for r in rows], dtype=dtype, device=device)

    return {
        "input_ids": padded([s.token_ids for s in samples], pad_id, torch.long),
        "attention_mask": padded([[1] * len(s.token_ids) for s in samples], 0, torch.long),
        "mask": padded([s.loss_mask for s in samples], 0, torch.float32),
        "old_logp": padded([s.logprobs for s in samples], 0.0, torch.float32),
        **({"prox_logp": padded([s.proximal for s in samples], 0.0, torch.float32)}  # type: ignore[misc]
           if all(s.proximal is not None for s in samples) else {}),
        # one per sequence unless turns carry their own (`train.turn_baseline`): then one per token
        "advantages": padded([s.token_advantages if s.token_advantages is not None
                              else [s.advantage] * len(s.token_ids) for s in samples], 0.0, torch.float32)
        if any(s.token_advantages is not None for s in samples)
        else torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
    }


def lr_lambda(cfg: TrainConfig | SFTConfig) -> Callable[[int], float]:
    """The learning rate's factor after `step` schedule steps: linear warm-up over `warmup_steps`, then
    constant or decaying to `lr_final` at the last of `steps` (`lr_decay`). RL's and SFT's sections both
    carry these fields."""
    warmup, total, final = cfg.warmup_steps, cfg.steps, cfg.lr_final

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if cfg.lr_decay == "constant" or total - 1 <= warmup:
            return 1.0
        done = min(1.0, (step - warmup) / (total - 1 - warmup))
        shape = done if cfg.lr_decay == "linear" else (1 - math.cos(math.pi * done)) / 2
        return 1.0 - (1.0 - final) * shape

    return factor


class PolicyUpdater:
    """AdamW on the trainable weights of `model`, with the configured loss, aggregation and accumulation."""

    def __init__(self, model: nn.Module, cfg: TrainConfig, *, pad_id: int, temperature: float = 1.0,
                 ref_model: nn.Module | None = None, dist: Dist = SINGLE) -> None:
        self.model = model
        self.dist = dist
        """The ranks sharing each optimizer step (rlvr.train.distributed); SINGLE: this process alone."""
        self.cfg = cfg
        self.pad_id = pad_id
        self.temperature = temperature
        self.ref_model = ref_model
        self.loss = loss_fn(cfg.loss)
        self.settings, aggregation = loss_settings(cfg)
        self.aggregate = aggregate_fn(aggregation)
        self.correction, self.correction_settings = correction_settings(cfg)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.lr_schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(cfg))
        self.compute_dtype = COMPUTE_DTYPES[cfg.mixed_precision]
        """bf16 under `train.mixed_precision`: what the forward passes compute in (None: the weights'
        dtype)."""
        if cfg.activation_checkpointing:  # in place on the model: SFT on the same model is checkpointed too
            enable_activation_checkpointing(model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def cast(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """The precision of a forward through `model`: autocast to the mixed-precision dtype, unless FSDP2
        casts the sharded policy itself (a separate reference model is never sharded, so it is autocast; the
        LoRA reference is the policy itself). The backward runs outside it, as autocast wants, and the loss is
        computed from float32 logits."""
        if self.compute_dtype is None or (model is not self.ref_model and casts_itself(self.dist)):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def step(self, samples: Sequence[Sample], seed: int = 0) -> dict[str, float]:
        """`epochs` passes over the samples, each split into `minibatches` optimizer steps accumulated over
        micro-batches; then one learning-rate schedule step. Returns namespaced metrics.

        The mismatch and entropy figures are measured on the forward passes at the starting weights: every
        sample's under decoupled (the proximal pass), the first minibatch's otherwise (the only ones before
        the first optimizer step)."""
        stats: dict[str, list[float]] = {}
        probe = MismatchProbe()
        if samples:
            # Dropout stays off: an importance ratio must compare the behaviour policy with the same
            # deterministic function, and on-policy ratios must start at exactly 1.
            self.model.eval()
            decoupled = self.cfg.off_policy == "decoupled"
            if decoupled:
                samples = self.with_proximal(samples, probe)
            order_gen = torch.Generator().manual_seed(seed)
            for epoch in range(self.cfg.epochs):
                order = list(range(len(samples))) if epoch == 0 else torch.randperm(len(samples),
                                                                                      generator=order_gen).tolist()
                for j, chunk in enumerate(_split(order, self.cfg.minibatches)):
                    first = epoch == 0 and j == 0 and not decoupled
                    self._optimizer_step([samples[i] for i in chunk], stats, probe if first else None)
        # a batch with no samples steps the schedule without an optimizer step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.lr_schedule.step()
        if self.dist.active:  # every rank's micro-batch statistics (loss and grad_norm are already global)
            token_stats = self.dist.all_gather({k: v for k,
                                                v in stats.items() if k not in ("loss", "grad_norm")})
            stats.update({k: [x for rank in token_stats for x in rank.get(k, [])] for k in token_stats[0]})
        pad, computed = stats.pop("padded_tokens", []), stats.pop("computed_tokens", [])
        out = {f"train/{k}": sum(v) / len(v) for k, v in stats.items() if v}
        if computed:
            out["train/padding_fraction"] = sum(pad) / max(sum(computed), 1.0)
        out["train/lr"] = self.optimizer.param_groups[0]["lr"]
        out["train/samples"] = float(len(samples))
        # The proximal pass runs every sample on every rank; the first minibatch is shared out between ranks.
        out.update(probe.metrics(self.dist if self.cfg.off_policy != "decoupled" else SINGLE))
        return out

    def _optimizer_step(self, chunk: list[Sample], stats: dict[str, list[float]],
                        probe: MismatchProbe | None = None) -> None:
        if not chunk:
            return
        self.optimizer.zero_grad(set_to_none=True)
        totals = BatchTotals(tokens=float(sum(sum(s.loss_mask) for s in chunk)), sequences=float(len(chunk)),
                             norm_length=float(self.cfg.norm_length))
        loss_sum = 0.0
        # Several ranks: each takes its share of the chunk (every rank holds the whole chunk; `totals` are the
        # chunk's, i.e. global), and FSDP2/DDP average gradients over ranks, so the loss is scaled by the
        # world
        # size to sum them; padding micro-batches (live False) keep the collectives paired and add nothing.
        for micro, live in self.micro_batches(chunk):
            loss, micro_stats = self.micro_loss(micro, totals, probe if live else None)
            (loss * (self.dist.world_size if live else 0.0)).backward()
            if live:
                loss_sum += float(loss.detach())
                for k, v in micro_stats.items():
                    stats.setdefault(k, []).append(v)
        loss_sum = self.dist.sum(loss_sum)
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        # FSDP2: a DTensor
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        if math.isfinite(float(grad_norm)):
            self.optimizer.step()  # a non-finite gradient is skipped, not applied
        stats.setdefault("loss", []).append(loss_sum)
        stats.setdefault("grad_norm", []).append(float(grad_norm))
        self.optimizer.zero_grad(set_to_none=True)

    def micro_batches(self, chunk: Sequence[Sample]) -> list[tuple[list[Sample], bool]]:
        """This rank's (micro-batch, live) pairs of an optimizer step's chunk: `micro_batch_size` samples
        each, or cut by `micro_batch_tokens` (rlvr.train.packing)."""
        budget = self.cfg.micro_batch_tokens
        if budget is None:
            return self.dist.micro_batches(chunk, self.cfg.micro_batch_size)
        return token_micro_batches(chunk, [len(s.token_ids) for s in chunk], budget, can_pack(self.model),
                                   self.dist.rank, self.dist.world_size)

    def layout(self, micro: Sequence[Sample], model: nn.Module) -> Layout:
        """Where the micro-batch's samples sit in the forward pass: one packed row under a token budget (when
        the model separates packed episodes), else one padded row each."""
        ids, masks = [s.token_ids for s in micro], [s.loss_mask for s in micro]
        if self.cfg.micro_batch_tokens is not None and can_pack(model):
            return packed(ids, masks, self.device)
        return padded(ids, masks, self.pad_id, self.device)

    def scores(self, model: nn.Module, micro: Sequence[Sample], width: int, *, entropy: bool = False,
               stats: dict[str, float] | None = None) -> TokenScores:
        """Log-probs (and the generated tokens' entropy) of the micro-batch under `model`, as (samples, width)
        tensors whatever the layout; computed over chunks of positions (rlvr.train.logprobs)."""
        lay = self.layout(micro, model)
        if stats is not None:  # summed over the step into train/padding_fraction
            stats["padded_tokens"], stats["computed_tokens"] = float(lay.padding), float(lay.computed)
        with self.cast(model):
            out = token_scores(model, lay.input_ids, lay.attention_mask, self.temperature,
                               position_ids=lay.position_ids, entropy_mask=lay.loss_mask if entropy else None)
        ent = None if out.entropy is None else unpack(out.entropy, lay, width)
        return TokenScores(logp=unpack(out.logp, lay, width), entropy=ent)

    @torch.no_grad()
    def with_proximal(self, samples: Sequence[Sample], probe: MismatchProbe | None = None) -> list[Sample]:
        """The samples with their log-probs under the current weights (the decoupled-PPO proximal policy)."""
        if self.cfg.micro_batch_tokens is None:
            micros = [list(samples[i:i + self.cfg.micro_batch_size])
                      for i in range(0, len(samples), self.cfg.micro_batch_size)]
        else:  # every sample on every rank, as without a budget
            micros = [m for m, _ in token_micro_batches(samples, [len(s.token_ids) for s in samples],
                                                        self.cfg.micro_batch_tokens, can_pack(self.model))]
        done: dict[int, Sample] = {}
        for micro in micros:
            b = collate(micro, self.pad_id, self.device)
            sc = self.scores(self.model, micro, b["mask"].shape[1], entropy=probe is not None)
            logp = sc.logp * b["mask"]
            if probe is not None:
                probe.add(logp, b["old_logp"], sc.entropy[b["mask"].bool()], b["mask"])  # type: ignore[index]
            for s, row in zip(micro, logp.tolist()):
                done[id(s)] = dataclasses.replace(s, proximal=row[:len(s.token_ids)])
        return [done[id(s)] for s in samples]  # in the samples' order, whatever the micro-batches' grouping

    def micro_loss(self, micro: Sequence[Sample], totals: BatchTotals,
                   probe: MismatchProbe | None = None) -> tuple[Tensor, dict[str, float]]:
        """This micro-batch's share of the batch loss (gradient-carrying) and its token statistics; `probe`
        collects the mismatch and entropy of these forward passes."""
        b = collate(micro, self.pad_id, self.device)
        width = b["mask"].shape[1]
        layout_stats: dict[str, float] = {}
        sc = self.scores(self.model, micro, width, entropy=probe is not None, stats=layout_stats)
        logp = sc.logp
        if probe is not None:
            probe.add(logp, b["old_logp"], sc.entropy[b["mask"].bool()], b["mask"])  # type: ignore[index]
        ref_logp = None
        if self.settings.kl_coef > 0:
            with torch.no_grad():
                ref_logp = self.scores(self.reference(), micro, width).logp
        old_logp, is_weight, extra = b["old_logp"], None, {}
        # decoupled PPO: clip against the proximal policy, weight by proximal / behaviour
        if "prox_logp" in b:
            is_weight, extra = behaviour_weight(b["prox_logp"], b["old_logp"], b["mask"], self.correction,
                                                self.correction_settings)
            old_logp = b["prox_logp"]
        batch = TokenBatch(logp=logp, old_logp=old_logp, advantages=b["advantages"], mask=b["mask"],
                           ref_logp=ref_logp, is_weight=is_weight)
        per_token, token_stats = self.loss(batch, self.settings)
        token_stats = {**token_stats, **extra}
        loss = self.aggregate(per_token, b["mask"], totals)
        n = b["mask"].sum().clamp(min=1.0)
        out = {k: float((v * b["mask"]).sum() / n) for k, v in token_stats.items()}
        return loss, {**out, **layout_stats}

    def reference(self) -> nn.Module:
        """The frozen reference: the given model, or the policy with its LoRA adapters switched off (the peft
        model itself: a DDP wrapper has no `disable_adapter`, and a forward without gradients needs none of
        DDP's hooks; under FSDP2 the peft model is the sharded root)."""
        if self.ref_model is not None:
            return self.ref_model
        peft = unwrapped(self.model)
        if getattr(peft, "disable_adapter", None) is None:
            raise ValueError("kl_coef > 0 needs a reference model (or LoRA, whose base model is "
                             "the reference)")
        return _AdapterOff(peft)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "lr_schedule": self.lr_schedule.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_schedule.load_state_dict(state["lr_schedule"])


class _AdapterOff(nn.Module):
    """Calls a peft model with its adapters disabled: the frozen base model is the KL reference."""

    def __init__(self, peft_model: nn.Module) -> None:
        super().__init__()
        self.inner = peft_model

    def forward(self, **kw):
        with self.inner.disable_adapter():
            return self.inner(**kw)

    def get_base_model(self) -> nn.Module:
        """The transformers model inside, where rlvr.train.logprobs finds the LM head and its attention."""
        return self.inner.get_base_model()


def _split(order: list[int], parts: int) -> list[list[int]]:
    size = math.ceil(len(order) / max(1, parts))
    return [order[i:i + size] for i in range(0, len(order), size)]


def reference_model(policy: Any, kl_coef: float, lora: bool) -> Any:
    """A frozen copy of the policy's model for the KL term; None without KL, or with LoRA (the base model with
    the adapters off is the reference)."""
    if kl_coef <= 0 or lora:
        return None
    ref = copy.deepcopy(policy.model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def apply_lora(policy: Any, rank: int) -> None:
    """Wrap the policy's model with LoRA adapters of `rank` on every linear layer (peft)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    policy.model = get_peft_model(policy.model, lora)


def check_settings(cfg: TrainConfig) -> None:
    """Refuse what the update could not run, before anything is built: unknown advantage, loss, aggregation or
    correction names (UserErrors with "did you mean")."""
    from rlvr.train.advantages import estimator

    estimator(cfg.advantage)
    loss_fn(cfg.loss)
    if cfg.turn_baseline and cfg.loss == "gspo":
        raise UserError("turn_baseline gives each turn its own advantage; gspo takes one per sequence",
                        field="train.turn_baseline",
                        fix='set it to false, or use loss = "ppo_clip", "pg" or "cispo"')
    aggregate_fn(loss_settings(cfg)[1])
    correction_settings(cfg)


def loss_settings(cfg: TrainConfig) -> tuple[LossSettings, str]:
    """The loss's settings and aggregation: what the config sets, else what the loss's paper uses
    (`PAPER_DEFAULTS`: GSPO's sequence mean and tight clip, CISPO's open lower bound)."""
    paper = paper_defaults(cfg.loss)
    settings = LossSettings(clip_low=paper.clip_low if cfg.clip_low is None else cfg.clip_low,
                            clip_high=paper.clip_high if cfg.clip_high is None else cfg.clip_high,
                            kl_coef=cfg.kl_coef)
    return settings, paper.aggregation if cfg.aggregation is None else cfg.aggregation
