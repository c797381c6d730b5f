"""Micro-batches cut by a token budget (`train.micro_batch_tokens`), and where a micro-batch's episodes sit in
the forward pass.

With a budget, an optimizer step's episodes are planned into micro-batches of at most that many computed
tokens. Where the model's attention allows it (a transformers model with sdpa, eager, flash or flex
attention), the episodes of a micro-batch are packed into one row: their tokens are concatenated, the position
ids restart at 0 for each episode and the attention mask is left out, from which transformers builds a
block-diagonal causal mask (flash attention: the sequence boundaries), so no token attends across episodes and
nothing is padded. Otherwise episodes are grouped by length, longest first, so that a micro-batch's padding is
at most `MAX_PADDING` of the tokens it computes. Either way the loss is computed per episode from the scores
laid back out as (episodes, positions) (`unpack`), with the batch's normalisers: the gradient is the one of
one episode at a time.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor, nn

from rlvr.errors import UserError

T = TypeVar("T")

MAX_PADDING = 0.10
"""The most padding a length-grouped micro-batch computes, as a share of its tokens."""

PACKING_ATTENTION = frozenset({"sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention"})
"""transformers attention implementations that turn restarting position ids without a mask into separate
sequences."""


@dataclass(frozen=True)
class Layout:
    """A micro-batch's tensors as the forward pass takes them, and where each episode sits in them."""

    input_ids: Tensor
    """(rows, width) token ids."""
    loss_mask: Tensor
    """(rows, width) 1.0 on generated tokens."""
    attention_mask: Tensor | None
    """(rows, width) 1 on real tokens; None when packed (the position ids separate the episodes)."""
    position_ids: Tensor | None
    """(rows, width) restarting at each episode when packed; None: the model's default."""
    spans: tuple[tuple[int, int, int], ...]
    """(row, start, length) of each episode, in the micro-batch's order."""

    @property
    def computed(self) -> int:
        """Tokens the forward pass computes, padding included."""
        return self.input_ids.numel()

    @property
    def padding(self) -> int:
        return self.computed - sum(n for _, _, n in self.spans)


def padded(token_ids: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], pad_id: int,
           device: torch.device) -> Layout:
    """One right-padded row per episode (the layout without a token budget)."""
    width = max(len(t) for t in token_ids)
    ids = torch.full((len(token_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(token_ids), width)
    att = torch.zeros(len(token_ids), width, dtype=torch.long)
    for i, (t, m) in enumerate(zip(token_ids, loss_masks)):
        ids[i, :len(t)] = torch.tensor(t, dtype=torch.long)
        mask[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
        att[i, :len(t)] = 1
    return Layout(ids.to(device), mask.to(device), att.to(device), None,
                  tuple((i, 0, len(t)) for i, t in enumerate(token_ids)))


def packed(token_ids: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]],
           device: torch.device) -> Layout:
    """Every episode in one row, position ids restarting at each, no attention mask."""
    ids = [x for t in token_ids for x in t]
    mask = [float(x) for m in loss_masks for x in m]
    pos = [p for t in token_ids for p in range(len(t))]
    spans, start = [], 0
    for t in token_ids:
        spans.append((0, start, len(t)))
        start += len(t)
    return Layout(torch.tensor([ids], dtype=torch.long, device=device), torch.tensor([mask], device=device),
                  None,
                  torch.tensor([pos], dtype=torch.long, device=device), tuple(spans))


def unpack(values: Tensor, layout: Layout, width: int) -> Tensor:
    """(episodes, width) of per-token `values` laid out as `layout`: each episode's from position 0,
    right-padded with 0. Position 0 of each episode is 0 (no prefix: in a packed row that position scores the
    previous episode's last token, which is not this episode's)."""
    out = values.new_zeros(len(layout.spans), width)
    for i, (row, start, n) in enumerate(layout.spans):
        out[i, 1:n] = values[row, start + 1:start + n]
    return out


def can_pack(model: nn.Module) -> bool:
    """Whether the model separates packed episodes by their position ids (a transformers model whose attention
    implementation is in PACKING_ATTENTION)."""
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    get_base = getattr(inner, "get_base_model", None)
    base = get_base() if callable(get_base) else inner
    config = getattr(base, "config", None)
    return getattr(config, "_attn_implementation", None) in PACKING_ATTENTION


def plan(lengths: Sequence[int], budget: int, pack: bool) -> list[list[int]]:
    """Indices of the episodes of each micro-batch, at most `budget` computed tokens each.

    Packed: first-fit decreasing into rows of `budget` tokens (no padding). Padded: longest first, an episode
    joins the current micro-batch while its rows x longest stay within the budget and the padding within
    MAX_PADDING. An episode longer than the budget is a UserError."""
    longest = max(lengths, default=0)
    if longest > budget:
        raise UserError(f"an episode of {longest} tokens does not fit in micro_batch_tokens = {budget}",
                        field="train.micro_batch_tokens",
                        fix=f"set it to at least {longest} (the longest episode; rollout.max_context_tokens "
                            "bounds it), or leave it unset for micro_batch_size episodes per micro-batch")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    if pack:
        room: list[int] = []
        for i in order:
            j = next((k for k, r in enumerate(room) if r >= lengths[i]), None)
            if j is None:
                groups.append([i])
                room.append(budget - lengths[i])
            else:
                groups[j].append(i)
                room[j] -= lengths[i]
    else:
        for i in order:
            g = groups[-1] if groups else None
            if g is not None:
                width, rows = lengths[g[0]], len(g) + 1
                real = sum(lengths[k] for k in g) + lengths[i]
                if rows * width <= budget and rows * width - real <= MAX_PADDING * rows * width:
                    g.append(i)
                    continue
            groups.append([i])
    return [sorted(g) for g in groups]


def token_micro_batches(chunk: Sequence[T], lengths: Sequence[int], budget: int, pack: bool, rank: int = 0,
                        world_size: int = 1) -> list[tuple[list[T], bool]]:
    """This rank's micro-batches of an optimizer step's `chunk` (every rank holds the same chunk), as
    (samples, live) pairs like `Dist.micro_batches`: the plan's micro-batches are dealt to the ranks by
    tokens, largest first to the least-loaded rank, and every rank gets as many as the busiest one, padded
    with (one real sample, False) entries whose loss the caller multiplies by 0 (FSDP2 and DDP collectives
    must pair up)."""
    groups = plan(lengths, budget, pack)
    if world_size == 1:
        return [([chunk[i] for i in g], True) for g in groups]
    load = [0] * world_size
    mine: list[list[list[int]]] = [[] for _ in range(world_size)]
    for g in sorted(groups, key=lambda g: (-sum(lengths[i] for i in g), g)):
        r = min(range(world_size), key=lambda k: (load[k], k))
        mine[r].append(g)
        load[r] += sum(lengths[i] for i in g)
    most = max(len(m) for m in mine)
    out = [([chunk[i] for i in g], True) for g in mine[rank]]
    return out + [([chunk[0]], False)] * (most - len(out))
