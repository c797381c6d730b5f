"""Supervised warm start: teach the policy the answer format from reference solutions or a JSONL file.

The prompt is rendered exactly as the rollout engine renders a single-turn episode (one user message through
the policy's chat template), so what SFT teaches is what RL later samples from. Only completion tokens and
the end-of-turn token carry loss. The learning rate is constant: a warm start whose rate was annealed to zero
is a poor start for RL on a small model.
"""
from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rlvr.config import SFTConfig
from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.tasks.source import TaskSource


@dataclass(frozen=True)
class SFTExample:
    """One supervised example."""

    prompt: str
    """The user message the model sees."""
    completion: str
    """The assistant's reply it should learn to give."""


def reference_examples(sources: Sequence[TaskSource], n: int, *, seed: int = 0,
                       limit_index: int | None = None) -> list[SFTExample]:
    """`n` examples from the sources' reference solutions (single-turn tasks whose gold is an answer).

    Procedural sources are drawn at random indices below `limit_index` (the held-out offset), so SFT never
    sees a held-out task; finite sources are sampled by `seed`. Tasks without an answer-style gold are skipped.
    """
    rng = random.Random(seed)
    out: list[SFTExample] = []
    per_source = max(1, -(-n // max(1, len(sources))))
    for src in sources:
        if src.size is None:
            hi = limit_index if limit_index is not None else 1_000_000
            indices = rng.sample(range(hi), min(per_source, hi))
        else:
            indices = src.indices(min(per_source, src.size), seed=seed)
        for i in indices:
            task = src.get(i)
            gold = src.gold(task)
            if gold is None or gold.answer is None or task.multi_turn:
                continue
            out.append(SFTExample(task.prompt, gold.answer))
    if not out:
        raise UserError("the training tasks have no single-turn reference answers to learn from",
                        field="sft.source", fix="give a JSONL file of {prompt, completion} records")
    rng.shuffle(out)
    return out[:n]


def jsonl_examples(path: str | Path) -> list[SFTExample]:
    """Examples from a JSONL file of `{"prompt": ..., "completion": ...}` records; bad lines are UserErrors."""
    p = Path(path)
    if not p.is_file():
        raise UserError("no such SFT file", file=p, field="sft.source", fix="give a JSONL path or `reference`")
    out: list[SFTExample] = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"invalid JSON: {exc.msg}", file=p, line=lineno, fix="one JSON object per line") from None
        if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) for k in ("prompt", "completion")):
            raise UserError("record needs string fields prompt and completion", file=p, line=lineno,
                            fix='write {"prompt": "...", "completion": "..."}')
        out.append(SFTExample(rec["prompt"], rec["completion"]))
    if not out:
        raise UserError("no records", file=p, field="sft.source", fix="add {prompt, completion} lines")
    return out


@dataclass(frozen=True)
class Encoded:
    """An example as token ids with its loss mask."""

    ids: list[int]
    mask: list[int]


def encode(policy, ex: SFTExample, max_len: int) -> Encoded:
    """Prompt tokens as the engine renders them, then the completion and the end-of-turn token (masked 1)."""
    prompt = policy.encode(policy.render([Message(role="user", content=ex.prompt)], add_generation_prompt=True))
    eos = policy.tokenizer.eos_token_id
    completion = policy.encode(ex.completion) + ([eos] if eos is not None else [])
    ids = (prompt + completion)[:max_len]
    return Encoded(ids, ([0] * len(prompt) + [1] * len(completion))[:max_len])


def sft_loss(model: nn.Module, batch: Sequence[Encoded], pad_id: int) -> torch.Tensor:
    """Mean cross-entropy over the completion tokens of the batch."""
    dev = next(model.parameters()).device
    width = max(len(e.ids) for e in batch)
    ids = torch.tensor([e.ids + [pad_id] * (width - len(e.ids)) for e in batch], device=dev)
    att = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in batch], device=dev)
    mask = torch.tensor([e.mask + [0] * (width - len(e.mask)) for e in batch], dtype=torch.float32, device=dev)
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = mask[:, 1:]
    return -(logp * m).sum() / m.sum().clamp(min=1.0)


def train_sft(policy, examples: Sequence[SFTExample], cfg: SFTConfig, *, seed: int = 0,
              on_step: Callable[[int, float], None] | None = None) -> dict[str, float]:
    """`cfg.steps` AdamW steps at a constant rate over shuffled examples; returns `sft/*` metrics.

    Dropout stays off (the model is kept in eval mode): with fresh procedural data there is nothing to
    regularise, and RL later compares log-probs of the same deterministic function.
    """
    model = policy.model
    encoded = [encode(policy, ex, policy.max_context) for ex in examples]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    rng = random.Random(seed)
    order: list[int] = []
    model.eval()
    losses: list[float] = []
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(encoded)))
            rng.shuffle(fresh)
            order.extend(fresh)
        batch = [encoded[order.pop()] for _ in range(min(cfg.batch_size, len(encoded)))]
        loss = sft_loss(model, batch, policy.pad_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step + 1, losses[-1])
    policy.version += 1
    tail = losses[-10:]
    return {"sft/steps": float(cfg.steps), "sft/examples": float(len(examples)),
            "sft/final_loss": sum(tail) / len(tail) if tail else float("nan")}
