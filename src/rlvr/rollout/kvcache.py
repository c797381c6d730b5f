"""The KV cache of one `hf` generation call: keys and values in reserved buffers, and prompts prefilled once.

transformers' DynamicCache concatenates every layer's keys and values at each new token, copying the whole
cache once per token and layer. `ReservedLayer` writes each token into a buffer reserved for the call (grown
in buckets of `BUCKET` tokens when a call outlives it) and hands attention a view of the filled part, so the
masks and attention are exactly those of a DynamicCache. `shared_prompts` finds the rows of a batch that
continue the same prompt (the G samples of a group at its first turn) and `common_prefix` the prefix that all
distinct prompts share (a system prompt, a tool listing): each is prefilled once and its keys and values are
copied to the rows that continue it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

BUCKET = 256
"""Tokens by which a layer's buffer grows when a call needs more than it reserved."""
MIN_SHARED = 16
"""Shortest prefix of the distinct prompts of a batch that is prefilled once for all of them."""


def _round_up(n: int) -> int:
    return -(-n // 64) * 64


class ReservedLayer(DynamicLayer):
    """A full-attention layer cache whose keys and values live in buffers with room for the tokens to come."""

    def __init__(self, reserve: int = BUCKET) -> None:
        super().__init__()
        self.reserve = reserve
        self.length = 0
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
        end = self.length + key_states.shape[-2]
        if self._keys is None or end > self._keys.shape[-2]:
            self._grow(key_states, value_states, end)
        assert self._keys is not None and self._values is not None
        self._keys[:, :, self.length:end] = key_states
        self._values[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> None:
        room = _round_up(max(end, self.reserve) if self._keys is None else end + BUCKET)
        keys = key_states.new_empty((*key_states.shape[:2], room, key_states.shape[-1]))
        values = value_states.new_empty((*value_states.shape[:2], room, value_states.shape[-1]))
        if self._keys is not None and self._values is not None and self.length:
            keys[:, :, :self.length] = self._keys[:, :, :self.length]
            values[:, :, :self.length] = self._values[:, :, :self.length]
        self._keys, self._values = keys, values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat) the rows `indices` of the batch."""
        if self._keys is None or self._values is None:
            return
        self._keys, self._values = self._keys[indices], self._values[indices]
        self.keys, self.values = self._keys[:, :, :self.length], self._values[:, :, :self.length]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self._keys is not None:
            self.batch_select_indices(torch.arange(self._keys.shape[0], device=self._keys.device)
                                      .repeat_interleave(repeats))

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes the negative number of tokens to remove")
        if self._keys is not None and self._values is not None and tokens_to_remove:
            self.length = max(0, self.length + tokens_to_remove)
            self.keys, self.values = self._keys[:, :, :self.length], self._values[:, :, :self.length]

    def reset(self) -> None:
        self._keys = self._values = None
        self.length = 0
        super().reset()


def reserved_cache(model: Any, reserve: int) -> Cache | None:
    """A cache of ReservedLayers with room for `reserve` tokens, for a model whose layers all use full
    attention; None for any other model (sliding windows, recurrent state, shared layers), which then builds
    its own cache."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    try:
        layers = DynamicCache(config=config).layers
    except (AttributeError, KeyError, TypeError, ValueError):  # a config without readable layer types
        return None
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    return Cache(layers=[ReservedLayer(reserve) for _ in layers])


def shared_prompts(prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """(distinct prompts in first-seen order, index into them of each row's prompt)."""
    index: dict[tuple[int, ...], int] = {}
    owner = [index.setdefault(tuple(p), len(index)) for p in prompts]
    return [list(p) for p in index], owner


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all `prompts` share, at most the shortest one's length minus one (every
    prompt keeps a last token of its own, whose logits start its generation)."""
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for other in prompts[1:]:
        n = next((i for i in range(n) if other[i] != first[i]), n)
    return max(n, 0)
