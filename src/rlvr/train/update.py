"""The policy update: turn scored episodes into AdamW steps on any transformers causal LM."""
from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from rlvr.config import TrainConfig
from rlvr.rollout.episode import Episode
from rlvr.train.losses import BatchTotals, LossSettings, TokenBatch, aggregate_fn, loss_fn


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


def samples_from(episodes: Sequence[Episode], advantages: dict[str, float]) -> list[Sample]:
    """The episodes that have an advantage and at least one generated token, as update samples."""
    out: list[Sample] = []
    for ep in episodes:
        if ep.episode_id not in advantages or not any(ep.loss_mask):
            continue
        if not (len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)):
            raise ValueError(f"episode {ep.episode_id}: token_ids, loss_mask and logprobs differ in length")
        out.append(Sample(list(ep.token_ids), list(ep.loss_mask), list(ep.logprobs), advantages[ep.episode_id]))
    return out


def token_logprobs(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, temperature: float) -> Tensor:
    """Log-prob of each token given its prefix, shape (B, T); position 0 (no prefix) gets 0."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    if temperature > 0:
        logits = logits / temperature  # the distribution the tokens were sampled from
    logp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(logp, (1, 0))


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
        "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32, device=device),
    }


def lr_lambda(warmup_steps: int):
    """Linear warm-up, then constant (RL on a small model is fragile under decaying schedules)."""
    return lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0


class PolicyUpdater:
    """AdamW on the trainable weights of `model`, with the configured loss, aggregation and accumulation."""

    def __init__(self, model: nn.Module, cfg: TrainConfig, *, pad_id: int, temperature: float = 1.0,
                 ref_model: nn.Module | None = None) -> None:
        self.model = model
        self.cfg = cfg
        self.pad_id = pad_id
        self.temperature = temperature
        self.ref_model = ref_model
        self.loss = loss_fn(cfg.loss)
        self.aggregate = aggregate_fn(cfg.aggregation)
        self.settings = LossSettings(clip_low=cfg.clip_low, clip_high=cfg.clip_high, kl_coef=cfg.kl_coef)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.lr_schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(cfg.warmup_steps))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def step(self, samples: Sequence[Sample], seed: int = 0) -> dict[str, float]:
        """`epochs` passes over the samples, each split into `minibatches` optimizer steps accumulated over
        micro-batches; then one learning-rate schedule step. Returns namespaced metrics."""
        stats: dict[str, list[float]] = {}
        if samples:
            # Dropout stays off: an importance ratio must compare the behaviour policy with the same
            # deterministic function, and on-policy ratios must start at exactly 1.
            self.model.eval()
            if self.cfg.off_policy == "decoupled":
                samples = self.with_proximal(samples)
            order_gen = torch.Generator().manual_seed(seed)
            for epoch in range(self.cfg.epochs):
                order = list(range(len(samples))) if epoch == 0 else torch.randperm(len(samples),
                                                                                      generator=order_gen).tolist()
                for chunk in _split(order, self.cfg.minibatches):
                    self._optimizer_step([samples[i] for i in chunk], stats)
        with warnings.catch_warnings():  # a batch with no samples steps the schedule without an optimizer step
            warnings.simplefilter("ignore", UserWarning)
            self.lr_schedule.step()
        out = {f"train/{k}": sum(v) / len(v) for k, v in stats.items() if v}
        out["train/lr"] = self.optimizer.param_groups[0]["lr"]
        out["train/samples"] = float(len(samples))
        return out

    def _optimizer_step(self, chunk: list[Sample], stats: dict[str, list[float]]) -> None:
        if not chunk:
            return
        self.optimizer.zero_grad(set_to_none=True)
        totals = BatchTotals(tokens=float(sum(sum(s.loss_mask) for s in chunk)), sequences=float(len(chunk)),
                             norm_length=float(self.cfg.norm_length))
        loss_sum = 0.0
        for i in range(0, len(chunk), self.cfg.micro_batch_size):
            loss, micro_stats = self.micro_loss(chunk[i:i + self.cfg.micro_batch_size], totals)
            loss.backward()
            loss_sum += float(loss.detach())
            for k, v in micro_stats.items():
                stats.setdefault(k, []).append(v)
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        if math.isfinite(float(grad_norm)):
            self.optimizer.step()  # a non-finite gradient is skipped, not applied
        stats.setdefault("loss", []).append(loss_sum)
        stats.setdefault("grad_norm", []).append(float(grad_norm))
        self.optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def with_proximal(self, samples: Sequence[Sample]) -> list[Sample]:
        """The samples with their log-probs under the current weights (the decoupled-PPO proximal policy)."""
        out: list[Sample] = []
        for i in range(0, len(samples), self.cfg.micro_batch_size):
            micro = samples[i:i + self.cfg.micro_batch_size]
            b = collate(micro, self.pad_id, self.device)
            logp = token_logprobs(self.model, b["input_ids"], b["attention_mask"], self.temperature) * b["mask"]
            for s, row in zip(micro, logp.tolist()):
                out.append(dataclasses.replace(s, proximal=row[:len(s.token_ids)]))
        return out

    def micro_loss(self, micro: Sequence[Sample], totals: BatchTotals) -> tuple[Tensor, dict[str, float]]:
        """This micro-batch's share of the batch loss (gradient-carrying) and its token statistics."""
        b = collate(micro, self.pad_id, self.device)
        logp = token_logprobs(self.model, b["input_ids"], b["attention_mask"], self.temperature)
        ref_logp = None
        if self.settings.kl_coef > 0:
            with torch.no_grad():
                ref_logp = token_logprobs(self.reference(), b["input_ids"], b["attention_mask"], self.temperature)
        old_logp, is_weight, extra = b["old_logp"], None, {}
        if "prox_logp" in b:  # decoupled PPO: clip against the proximal policy, weight by proximal / behaviour
            behaviour_ratio = torch.exp(b["prox_logp"] - b["old_logp"])
            is_weight = behaviour_ratio.clamp(max=self.cfg.is_cap)
            old_logp = b["prox_logp"]
            extra = {"is_weight": is_weight, "is_truncated": (behaviour_ratio > self.cfg.is_cap).float()}
        batch = TokenBatch(logp=logp, old_logp=old_logp, advantages=b["advantages"], mask=b["mask"],
                           ref_logp=ref_logp, is_weight=is_weight)
        per_token, token_stats = self.loss(batch, self.settings)
        token_stats = {**token_stats, **extra}
        loss = self.aggregate(per_token, b["mask"], totals)
        n = b["mask"].sum().clamp(min=1.0)
        out = {k: float((v * b["mask"]).sum() / n) for k, v in token_stats.items()}
        return loss, out

    def reference(self) -> nn.Module:
        """The frozen reference: the given model, or the policy with its LoRA adapters switched off."""
        if self.ref_model is not None:
            return self.ref_model
        disable = getattr(self.model, "disable_adapter", None)
        if disable is None:
            raise ValueError("kl_coef > 0 needs a reference model (or LoRA, whose base model is the reference)")
        return _AdapterOff(self.model)

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


def _split(order: list[int], parts: int) -> list[list[int]]:
    size = math.ceil(len(order) / max(1, parts))
    return [order[i:i + size] for i in range(0, len(order), size)]
