"""Supervised warm start: teach the policy the answer format from reference solutions, gold tool trajectories
or a JSONL file.

The prompt is rendered exactly as the env loop renders a single-turn episode (one user message through
the policy's chat template), so what SFT teaches is what RL later samples from; a gold trajectory (`[sft]
source = "gold"`, `rlvr.rollout.policies.gold`) is an episode's own token record, played through the env by
the run's engine. Only completion tokens and the end-of-turn token carry loss. The learning rate is constant:
a warm start whose rate was annealed to zero is a poor start for RL on a small model.
"""
from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlvr.config import SFTConfig
from rlvr.envs.messages import Message
from rlvr.errors import UserError
from rlvr.rollout.episode import Episode, split_segments
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task
from rlvr.train.activations import enable_activation_checkpointing
from rlvr.train.distributed import SINGLE, Dist
from rlvr.train.logprobs import token_scores
from rlvr.train.update import lr_lambda


@dataclass(frozen=True)
class SFTExample:
    """One supervised example."""

    prompt: str
    """The user message the model sees."""
    completion: str
    """The assistant's reply it should learn to give."""


def draw_tasks(sources: Sequence[TaskSource], n: int, *, seed: int = 0, limit_index: int | None = None,
               exclude: Collection[str] = ()) -> list[tuple[TaskSource, Task]]:
    """About `n` training tasks spread over the sources, never a held-out one: procedural sources are drawn at
    random indices below `limit_index` (the held-out offset), finite ones sampled by `seed`, and any task
    whose key is in `exclude` (the run's held-out set) is left out."""
    rng = random.Random(seed)
    out: list[tuple[TaskSource, Task]] = []
    per_source = max(1, -(-n // max(1, len(sources))))
    for src in sources:
        if src.size is None:
            hi = limit_index if limit_index is not None else 1_000_000
            indices = rng.sample(range(hi), min(per_source, hi))
        else:
            indices = src.indices(min(per_source, src.size), seed=seed)
        for i in indices:
            task = src.get(i)
            if task.key not in exclude:
                out.append((src, task))
    return out


def reference_examples(sources: Sequence[TaskSource], n: int, *, seed: int = 0,
                       limit_index: int | None = None,
                       exclude: Collection[str] = ()) -> list[SFTExample]:
    """`n` examples from the sources' reference solutions (single-turn tasks whose gold is an answer), drawn
    by `draw_tasks` (never a held-out task). Tasks without an answer-style gold are skipped."""
    out: list[SFTExample] = []
    for src, task in draw_tasks(sources, n, seed=seed, limit_index=limit_index, exclude=exclude):
        gold = src.gold(task)
        if gold is None or gold.answer is None or task.multi_turn:
            continue
        out.append(SFTExample(task.prompt, gold.answer))
    if not out:
        raise UserError("the training tasks have no single-turn reference answers to learn from",
                        field="sft.source",
                        fix='use source = "gold" for multi-turn tasks, or a JSONL file of '
                                                "{prompt, completion} records")
    random.Random(seed).shuffle(out)
    return out[:n]


def gold_examples(sources: Sequence[TaskSource], n: int, gold: Callable[[Any], Any], encoder: Any, *,
                  seed: int = 0, limit_index: int | None = None,
                  exclude: Collection[str] = ()) -> list[Encoded]:
    """Gold trajectories of about `n` training tasks (`rlvr.rollout.policies.gold`: each reference played
    through the env by `gold(policy)`, the run's env loop), as the trained policy's token records; never a
    held-out task. A domain without references is a UserError naming it."""
    from rlvr.rollout.policies.gold import plan_for, play

    plans = [plan_for(task, src) for src, task in
             draw_tasks(sources, n, seed=seed, limit_index=limit_index, exclude=exclude)]
    episodes = play(plans, gold, encoder=encoder, seed=seed)
    if not episodes:
        raise UserError("no gold trajectory of the training tasks passed its verifier", field="sft.source",
                        fix="check the domains' references with `rlvr tasks validate --domain NAME`")
    return [episode_example(ep) for ep in split_segments(episodes)]  # a record that started over: each part


def warm_start_examples(cfg: SFTConfig, sources: Sequence[TaskSource], gold: Callable[[Any], Any],
                        encoder: Any,
                        *, seed: int = 0, limit_index: int | None = None,
                        exclude: Collection[str] = ()) -> list[SFTExample] | list[Encoded]:
    """The warm start's examples from `sft.source`: the training tasks' reference answers (`reference`), their
    gold trajectories played by `gold(policy)` (`gold`), or a JSONL file; never a task of `exclude` (the
    held-out set)."""
    if cfg.source == "reference":
        return reference_examples(sources, cfg.examples, seed=seed, limit_index=limit_index, exclude=exclude)
    if cfg.source == "gold":
        return gold_examples(sources, cfg.examples, gold, encoder, seed=seed, limit_index=limit_index,
                             exclude=exclude)
    return jsonl_examples(cfg.source)


def episode_example(ep: Episode) -> Encoded:
    """An episode's token record as an SFT example: loss on the assistant's tokens (its `loss_mask`)."""
    return Encoded(list(ep.token_ids), list(ep.loss_mask))


def jsonl_examples(path: str | Path) -> list[SFTExample]:
    """Examples from a JSONL file of `{"prompt": ..., "completion": ...}` records; bad lines are
    UserErrors."""
    p = Path(path)
    if not p.is_file():
        raise UserError("no such SFT file", file=p, field="sft.source",
                        fix="give a JSONL path or `reference`")
    out: list[SFTExample] = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"invalid JSON: {exc.msg}", file=p, line=lineno,
                            fix="one JSON object per line") from None
        if not isinstance(rec,
                          dict) or not all(isinstance(rec.get(k), str) for k in ("prompt", "completion")):
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
    """Prompt tokens as the env loop renders them, then the completion and the end-of-turn token (masked
    1)."""
    prompt = policy.encode(policy.render([Message(role="user", content=ex.prompt)],
                                         add_generation_prompt=True))
    eos = policy.tokenizer.eos_token_id
    completion = policy.encode(ex.completion) + ([eos] if eos is not None else [])
    ids = (prompt + completion)[:max_len]
    return Encoded(ids, ([0] * len(prompt) + [1] * len(completion))[:max_len])


def encoded(policy, examples: Sequence[SFTExample | Encoded]) -> list[Encoded]:
    """Examples as token records (prompt/completion pairs rendered and encoded as `encode` does)."""
    return [ex if isinstance(ex, Encoded) else encode(policy, ex, policy.max_context) for ex in examples]


def trained_tokens(batch: Sequence[Encoded]) -> int:
    """Tokens of `batch` that carry loss (position 0 never does: nothing predicts it)."""
    return sum(sum(e.mask[1:]) for e in batch)


def sft_loss(model: nn.Module, batch: Sequence[Encoded], pad_id: int,
             total: float | None = None) -> torch.Tensor:
    """Cross-entropy summed over the completion tokens of `batch`, divided by `total` (default the batch's own
    count: the mean; on several ranks the whole step's, so the shares add up to one rank's loss)."""
    dev = next(model.parameters()).device
    width = max(len(e.ids) for e in batch)
    ids = torch.tensor([e.ids + [pad_id] * (width - len(e.ids)) for e in batch], device=dev)
    att = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in batch], device=dev)
    mask = torch.tensor([e.mask + [0] * (width - len(e.mask)) for e in batch], dtype=torch.float32,
                        device=dev)
    logp = token_scores(model, ids, att, 1.0).logp  # over chunks of positions: no (B, T, V) logits
    denominator = mask[:, 1:].sum().clamp(min=1.0) if total is None else torch.tensor(max(total, 1.0),
                                                                                      device=dev)
    return -(logp * mask).sum() / denominator


def sft_step(model: nn.Module, batch: Sequence[Encoded], pad_id: int, opt: torch.optim.Optimizer,
             params: Sequence[torch.nn.Parameter], dist: Dist = SINGLE) -> float:
    """One AdamW step of `sft_loss` on `batch` (gradients clipped at 1); the batch's loss.

    On several ranks each takes its share of the batch (`dist.micro_batches`: every rank holds the whole
    batch) and divides by the batch's token count; FSDP2/DDP average gradients over ranks, so the loss is
    scaled by the world size to sum them: the step is the one a single rank takes on the whole batch, to float
    noise. A rank with no share runs a dummy pass whose loss counts 0, so the collectives pair up."""
    total = float(trained_tokens(batch))
    opt.zero_grad(set_to_none=True)
    local = 0.0
    for mine, live in dist.micro_batches(list(batch), len(batch)):
        loss = sft_loss(model, mine, pad_id, total)
        (loss * (dist.world_size if live else 0.0)).backward()
        local += float(loss.detach()) if live else 0.0
    grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    # FSDP2: a DTensor
    grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    if math.isfinite(float(grad_norm)):
        opt.step()  # a non-finite gradient is skipped, not applied
    return dist.sum(local)


def train_sft(policy, examples: Sequence[SFTExample | Encoded], cfg: SFTConfig, *, seed: int = 0,
              on_step: Callable[[int, float], None] | None = None,
              activation_checkpointing: bool = False, dist: Dist = SINGLE) -> dict[str, float]:
    """`cfg.steps` AdamW steps (at the rate `cfg.lr_decay` shapes) over shuffled examples (prompt/completion
    pairs, or token records such as gold trajectories); returns `sft/*` metrics.

    Dropout stays off (the model is kept in eval mode): with fresh procedural data there is nothing to
    regularise, and RL later compares log-probs of the same deterministic function. `activation_checkpointing`
    checkpoints every block (a run's updater has already done so on the same model when
    `train.activation_checkpointing` is set). With several ranks (`dist`) every rank draws the same batches
    and computes its share of each (`sft_step`): N ranks train what one rank trains.
    """
    model = policy.model
    if activation_checkpointing:
        enable_activation_checkpointing(model)
    records = encoded(policy, examples)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    rng = random.Random(seed)
    order: list[int] = []
    model.eval()
    losses: list[float] = []
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(records)))
            rng.shuffle(fresh)
            order.extend(fresh)
        batch = [records[order.pop()] for _ in range(min(cfg.batch_size, len(records)))]
        losses.append(sft_step(model, batch, policy.pad_id, opt, params, dist))
        schedule.step()
        if on_step is not None:
            on_step(step + 1, losses[-1])
    policy.version += 1
    tail = losses[-10:]
    return {"sft/steps": float(cfg.steps), "sft/examples": float(len(examples)),
            "sft/final_loss": sum(tail) / len(tail) if tail else float("nan")}
