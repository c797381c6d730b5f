"""The KV cache of one `hf` generation call: keys and values in reserved buffers, and prompts prefilled once.

transformers' DynamicCache concatenates every layer's keys and values at each new token, copying the whole
cache once per token and layer. `ReservedLayer` writes each token into a buffer reserved for the call (grown
in buckets of `BUCKET` tokens when a call outlives it) and hands attention a view of the filled part, so the
masks and attention are exactly those of a DynamicCache. `shared_prompts` finds the rows of a batch that
continue the same prompt (the G samples of a group at its first turn) and `common_prefix` the prefix that all
distinct prompts share (a system prompt, a tool listing): each is prefilled once and its keys and values are
copied to the rows that continue it.

`PrefixCache` keeps keys and values between calls: after a call, each row's prompt and generated tokens
(all but the last, which the model has not read yet) with their keys and values, in a least-recently-used
store capped in tokens. The next turn of an episode extends that record
(rlvr.rollout.core.tokens.TokenStream), so its prompt starts with a stored sequence: `prime` places the stored
keys and values in the call's reserved cache and only the new tokens are prefilled. A prompt that shares only
part of a stored sequence (the stream restarted after elision, another episode with the same system prompt)
reuses that part; any change of the weights (`fingerprint`) empties the store.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
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

    def prime(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Start from buffers whose first `length` columns are already filled (a stored prefix)."""
        self.device, self.is_initialized = keys.device, True
        self._keys, self._values, self.length = keys, values, length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

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


REUSE_BYTES = 2 << 30
"""Default size of a PrefixCache (its cap in tokens is this over the bytes of one token's keys and values)."""


def prime(cache: Cache, kvs: Sequence[torch.Tensor | None], lengths: Sequence[int], head: int,
          reserve: int) -> None:
    """Fill a fresh reserved cache's first `head` columns with each row's stored prefix (`kvs[r]`, shaped
    (layers, 2, heads, tokens, head_dim), its first `lengths[r]` tokens), right-aligned: zeros (masked) before
    a shorter one."""
    ref = next(kv for kv in kvs if kv is not None)
    room = _round_up(max(head, reserve))
    for li, layer in enumerate(cache.layers):
        keys = ref.new_zeros((len(kvs), ref.shape[2], room, ref.shape[4]))
        values = torch.zeros_like(keys)
        for r, (kv, n) in enumerate(zip(kvs, lengths)):
            if kv is not None and n:
                keys[r, :, head - n:head] = kv[li, 0, :, :n]
                values[r, :, head - n:head] = kv[li, 1, :, :n]
        assert isinstance(layer, ReservedLayer)
        layer.prime(keys, values, head)


def row_kv(cache: Cache, row: int, cols: torch.Tensor) -> torch.Tensor:
    """A copy of one batch row's keys and values at columns `cols`: (layers, 2, heads, len(cols),
    head_dim)."""
    layers = [layer for layer in cache.layers if isinstance(layer, ReservedLayer) and layer._keys is not None]
    assert len(layers) == len(cache.layers)
    pairs = [(x.keys, x.values) for x in layers]
    return torch.stack([torch.stack((k[row].index_select(1, cols),  # type: ignore[index]
                                     v[row].index_select(1, cols)))  # type: ignore[index]
                        for k, v in pairs])


def is_reserved(cache: Any) -> bool:
    return isinstance(cache,
                      Cache) and bool(cache.layers) and all(isinstance(x, ReservedLayer)
                                                            for x in cache.layers)


def fingerprint(model: Any, version: int) -> tuple[int, int, int]:
    """What the stored keys and values depend on: the model object, its policy version, and the in-place
    version counters of its parameters (an optimizer step or a weight copy moves them, version bump or
    not)."""
    return id(model), version, sum(p._version for p in model.parameters())


class PrefixCache:
    """Keys and values of sequences generated by earlier calls, by token prefix; least recently used first
    out.

    `max_tokens` caps the tokens held (None: as many as fit in REUSE_BYTES; 0: off). Thread-safe."""

    def __init__(self, max_tokens: int | None = None) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, tuple[np.ndarray, torch.Tensor]] = OrderedDict()
        self._next = 0
        self.tokens = 0
        self.fingerprint: Any = None
        self.reused_tokens = 0
        """Prompt tokens taken from the store instead of prefilled, over the cache's life."""
        self.prefilled_tokens = 0
        """Prompt tokens prefilled (while on)."""
        self._lock = threading.Lock()

    @property
    def on(self) -> bool:
        return self.max_tokens != 0

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, fingerprint: Any) -> None:
        """Empty the store when the weights that made it are not the ones about to generate."""
        with self._lock:
            if fingerprint != self.fingerprint:
                self._entries.clear()
                self.tokens, self.fingerprint = 0, fingerprint

    def clear(self) -> None:
        self.check(None)

    def lookup(self, prompt: Sequence[int]) -> tuple[int | None, int]:
        """(entry, tokens) of the stored sequence sharing the longest prefix with `prompt`, at most all but
        its last token and at least MIN_SHARED; (None, 0) when none does."""
        if not self._entries or len(prompt) <= MIN_SHARED:
            return None, 0
        p = np.asarray(prompt, dtype=np.int64)
        best, most = None, 0
        with self._lock:
            for key, (ids, _) in self._entries.items():
                n = min(len(ids), len(p) - 1)
                if n <= most or n < MIN_SHARED or ids[0] != p[0]:
                    continue
                diff = np.flatnonzero(ids[:n] != p[:n])
                m = int(diff[0]) if diff.size else n
                if m > most:
                    best, most = key, m
            if most < MIN_SHARED:
                return None, 0
            self._entries.move_to_end(best)  # type: ignore[arg-type]
            return best, most

    def kv(self, entry: int) -> torch.Tensor | None:
        with self._lock:
            got = self._entries.get(entry)
            return got[1] if got is not None else None

    def store(self, ids: Sequence[int], kv: torch.Tensor) -> None:
        """Keep `kv` (layers, 2, heads, len(ids), head_dim) for the sequence `ids`, dropping stored sequences
        it extends and evicting the least recently used entries beyond the cap; a sequence longer than the cap
        is not kept."""
        if kv.shape[3] != len(ids):
            raise ValueError(f"{kv.shape[3]} cached tokens for a sequence of {len(ids)}")
        with self._lock:
            if self.max_tokens is None:
                self.max_tokens = max(1, REUSE_BYTES // max(1, kv[:, :, :, :1].numel() * kv.element_size()))
            cap = self.max_tokens
            if not cap or len(ids) > cap:
                return
            new = np.asarray(ids, dtype=np.int64)
            for key in [k for k, (old, _) in self._entries.items()  # superseded: a prefix of the new sequence
                        if len(old) <= len(new) and old[0] == new[0] and np.array_equal(old, new[:len(old)])]:
                self.tokens -= len(self._entries.pop(key)[0])
            self._entries[self._next] = (new, kv)
            self._next += 1
            self.tokens += len(ids)
            while self.tokens > cap:
                _, (old, _) = self._entries.popitem(last=False)
                self.tokens -= len(old)
