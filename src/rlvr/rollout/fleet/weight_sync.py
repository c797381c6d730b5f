"""The weight-sync group: how the trainer's weights reach the vLLM engine actors after each update.

The trainer (rank 0) and every engine worker (ranks 1..) form a process group on a TCPStore that the trainer
hosts: gloo on CPU, NCCL where both sides hold their weights on CUDA. It is built from
`ProcessGroupGloo`/`ProcessGroupNCCL` directly, so the default process group is never touched: the engine's
own vLLM uses that one, and a trainer may be a torchrun rank with its own. A sync sends the tensor names,
dtypes and shapes as a control message (`tensor_meta`, through Ray, by rlvr.rollout.fleet.engines), then
broadcasts the bytes in buckets of up to `BUCKET_BYTES` (`WeightGroup.send`); each receiver plans the same
buckets from the meta alone and yields the tensors as their bucket arrives, the next bucket in flight
meanwhile (`WeightGroup.receive`). A tensor that is an earlier one under another name (a tied weight) is sent
once (`tensor_aliases`).

What a sync sends (the trainer's side, `Changes` and `adapter_weights`):
- Under LoRA only the adapters move (`adapter_weights`: the peft state dict and adapter config that
  `save_pretrained` would write); the engines load them as a vLLM LoRA adapter over their untouched base
  weights.
- With all weights trained, tensors that did not change since the engines last received them are skipped.
  Only frozen tensors (no `requires_grad`: frozen embeddings, buffers) are ever candidates: an optimizer step
  changes every trainable one. A frozen tensor is skipped when the SHA-256 of its bytes equals the one it had
  when the engines last received it. Why a fingerprint and not torch's `_version` counter: writes through
  `.data`, from numpy views or by loading a state dict into `.data` do not bump it, and a wrong skip would
  leave an engine sampling with stale weights; a fingerprint sees every change of the bytes, at the cost of
  reading the frozen tensors once per sync (about 1 GB/s on one core, less than sending them).
  Tensors are skipped a whole unit at a time (`unit_of`: a transformer block, else a module), because vLLM's
  in-place reload rebuilds each of its layers from what it receives, and its layers fuse tensors of one block
  (q/k/v into one projection, gate/up, a layer's weight and bias): a layer given only some of its tensors
  would be rebuilt with the rest uninitialised.

Nothing here knows Ray or vLLM: it is torch.distributed and bytes (and peft's names, for adapters).
"""
from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

BUCKET_BYTES = 128 << 20
"""Largest broadcast of one sync (tensors are packed as bytes; a larger tensor goes alone)."""
ALIGN = 64
"""Byte alignment of each tensor inside a bucket (a byte view is re-viewed as its dtype in place)."""
GROUP_TIMEOUT_S = 600.0
"""Limit of the group's rendezvous and of each broadcast: a lost engine fails a sync, never hangs it."""

Meta = list[tuple[str, str, tuple[int, ...]]]
"""(name, dtype, shape) of each tensor of a sync, in the order they are broadcast."""
Aliases = dict[int, int]
"""Index in a sync's meta -> the earlier index it is the very same tensor as (tied weights: sent once)."""


@dataclass(frozen=True)
class Slot:
    """Where one tensor lies in a bucket."""

    index: int
    offset: int
    nbytes: int


def tensor_meta(pairs: Sequence[tuple[str, Any]]) -> Meta:
    """The control message of a sync: names, dtypes (torch names without the `torch.` prefix) and shapes."""
    return [(name, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in pairs]


def tensor_aliases(pairs: Sequence[tuple[str, Any]]) -> Aliases:
    """The tensors that are an earlier one under another name (same memory, dtype, shape and strides)."""
    first: dict[tuple[Any, ...], int] = {}
    out: Aliases = {}
    for i, (_, t) in enumerate(pairs):
        key = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        if t.numel() and key in first:
            out[i] = first[key]
        else:
            first.setdefault(key, i)
    return out


def buckets(meta: Meta, limit: int = BUCKET_BYTES, aliases: Aliases | None = None) -> list[list[Slot]]:
    """The broadcast plan of a sync, computed alike by sender and receivers from the meta (aliases are not
    sent)."""
    import math

    import torch

    out: list[list[Slot]] = []
    end = 0
    for i, (_, dtype, shape) in enumerate(meta):
        if aliases and i in aliases:
            continue
        size = math.prod(shape) * getattr(torch, dtype).itemsize
        start = -(-end // ALIGN) * ALIGN
        if not out or start + size > limit:
            out.append([])
            start = 0
        out[-1].append(Slot(i, start, size))
        end = start + size
    return out


def bucket_size(bucket: list[Slot]) -> int:
    return bucket[-1].offset + bucket[-1].nbytes if bucket else 0


# ------------------------------------------------------------------------------------- what a sync sends
def unit_of(name: str) -> str:
    """The part of the model a tensor is sent or skipped with: its transformer block (the name up to its first
    numeric component: `model.layers.3`), else its module (`model.embed_tokens`, `model.norm`)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 1])
    return ".".join(parts[:-1])


def fingerprint(t: Any) -> bytes:
    """SHA-256 of a tensor's dtype, shape and bytes."""
    import torch

    flat = t.detach().reshape(-1).contiguous()
    if flat.device.type != "cpu":
        flat = flat.cpu()
    h = hashlib.sha256(f"{flat.dtype}{tuple(t.shape)}".encode())
    if flat.numel():
        h.update(flat.view(torch.uint8).numpy().data)
    return h.digest()


class Changes:
    """The trainer's record of the frozen tensors the engines hold (name -> fingerprint), and the choice of
    what a sync sends (see the module docstring). `forget()` whenever the engines' weights are unknown or new:
    a failed sync, an engine joined, weights loaded from elsewhere; the next sync then sends everything."""

    def __init__(self) -> None:
        self.held: dict[str, bytes] = {}

    def select(self, pairs: Sequence[tuple[str, Any]],
               frozen: Sequence[bool]) -> tuple[list[tuple[str, Any]], dict[str, bytes]]:
        """(the pairs to send, the fingerprints to `commit` once they are received): every unit holding a
        trainable tensor, or a frozen one whose fingerprint is not the one held."""
        prints = {name: fingerprint(t) for (name, t), f in zip(pairs, frozen) if f}
        stale = {unit_of(name) for (name, _),
                 f in zip(pairs, frozen) if not f or self.held.get(name) != prints[name]}
        return [(name, t) for name, t in pairs if unit_of(name) in stale], prints

    def commit(self, prints: dict[str, bytes]) -> None:
        self.held = dict(prints)

    def forget(self) -> None:
        self.held = {}


def frozen_mask(model: Any, pairs: Sequence[tuple[str, Any]]) -> list[bool]:
    """Which of `pairs` (a model's state dict, tensors sharing its parameters' memory) are no trainable
    parameter: buffers, and parameters with `requires_grad` off."""
    trainable = {p.data_ptr() for p in model.parameters() if p.requires_grad}
    return [t.data_ptr() not in trainable for _, t in pairs]


def is_adapter_model(model: Any) -> bool:
    """A peft model (LoRA adapters over a frozen base)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def adapter_weights(model: Any) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """The active LoRA adapter of a peft model: its (name, tensor) pairs and its adapter config, as peft's
    `save_pretrained` writes them (what vLLM loads as an adapter). A plain LoRA (no bias, DoRA or extra saved
    modules) is read from the parameters directly, which is what peft's own state dict holds, without the pass
    over the whole model's state dict that takes peft about 30 ms on a 135M model."""
    name = model.active_adapter if isinstance(model.active_adapter, str) else model.active_adapter[0]
    cfg = model.peft_config[name]
    config = json.loads(json.dumps(cfg.to_dict(), default=_jsonable))
    if config.get("bias", "none") != "none" or config.get("use_dora") or config.get("modules_to_save"):
        from peft import get_peft_model_state_dict

        return [(k, v.detach()) for k,
                v in get_peft_model_state_dict(model, adapter_name=name).items()], config
    mark = f".{name}."
    pairs = [(k.replace(mark, "."), p.detach()) for k,
             p in model.named_parameters() if ".lora_" in k and mark in k]
    return pairs, config


def base_weights(model: Any) -> list[tuple[str, Any]]:
    """A peft model's base weights without its adapters (names as the base model saves them)."""
    return [(k.replace(".base_layer", ""), v.detach()) for k, v in model.get_base_model().state_dict().items()
            if ".lora_" not in k]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)


class WeightGroup:
    """A process group between the trainer (rank 0, which hosts the store) and the engine workers, made
    without the default process group; it carries weights one way, by broadcast from rank 0."""

    def __init__(self, pg: Any, store: Any, rank: int, world_size: int, device: str,
                 bucket_bytes: int = BUCKET_BYTES) -> None:
        self.pg, self.store, self.rank, self.world_size, self.device = pg, store, rank, world_size, device
        self.bucket_bytes = bucket_bytes
        """Every rank of a group must use the same value (the buckets are planned from the meta alone)."""

    @classmethod
    def open(cls, host: str, port: int, rank: int, world_size: int, backend: str, device: str = "cpu",
             store: Any = None, timeout_s: float = GROUP_TIMEOUT_S,
             prefix: str = "rlvr-weights") -> WeightGroup:
        """Join the group (blocks until every rank has joined); rank 0 passes the store it hosts. A group
        rebuilt for new members (an engine replaced or added) takes a fresh `prefix`, so that no key of the
        old group's rendezvous is read by the new one."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(host, port, world_size, False, timeout=timeout)
        prefixed = dist.PrefixStore(prefix, store)
        pg: Any
        if backend == "gloo":
            pg = dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
        elif backend == "nccl":
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            pg = dist.ProcessGroupNCCL(prefixed, rank, world_size, opts)
        else:
            raise ValueError(f"unknown weight-sync backend {backend!r}")
        return cls(pg, store, rank, world_size, device)

    @staticmethod
    def host_store(host: str, world_size: int, timeout_s: float = GROUP_TIMEOUT_S) -> Any:
        """The group's TCPStore, served by the trainer on a free port (`store.port`)."""
        import torch.distributed as dist

        return dist.TCPStore(host, 0, world_size, True, timeout=datetime.timedelta(seconds=timeout_s),
                             wait_for_workers=False)

    def _broadcast(self, buf: Any) -> Any:
        """Start the broadcast of one bucket (its Work); gloo and NCCL match the ranks' calls in order."""
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        return self.pg.broadcast([buf], opts)

    def send(self, pairs: Sequence[tuple[str, Any]], aliases: Aliases | None = None) -> int:
        """Rank 0: broadcast the tensors' bytes bucket by bucket, packing the next bucket while one is on the
        wire; the bytes sent."""
        import torch

        plan = buckets(tensor_meta(pairs), self.bucket_bytes, aliases)
        flying = None
        for bucket in plan:
            buf = torch.empty(bucket_size(bucket), dtype=torch.uint8, device=self.device)
            for s in bucket:
                src = pairs[s.index][1].detach().reshape(-1).contiguous().view(torch.uint8)
                buf[s.offset:s.offset + s.nbytes].copy_(src)
            work = self._broadcast(buf)
            if flying is not None:
                flying[1].wait()
            flying = (buf, work)
        if flying is not None:
            flying[1].wait()
        return sum(s.nbytes for bucket in plan for s in bucket)

    def receive(self, meta: Meta, aliases: Aliases | None = None) -> Iterator[tuple[str, Any]]:
        """Ranks 1..: the (name, tensor) pairs as their bucket arrives, the next bucket arriving while the
        caller loads this one. Each bucket is a fresh buffer, since a loader may keep what it was given until
        a layer is complete. An alias comes right after the tensor it is."""
        import torch

        plan = buckets(meta, self.bucket_bytes, aliases)
        named = {src: [j for j, k in (aliases or {}).items() if k == src]
                 for src in set((aliases or {}).values())}

        def post(k: int) -> Any:
            buf = torch.empty(bucket_size(plan[k]), dtype=torch.uint8, device=self.device)
            return buf, self._broadcast(buf)

        ahead: Any = post(0) if plan else None
        for k, bucket in enumerate(plan):
            buf, work = ahead
            work.wait()
            ahead = post(k + 1) if k + 1 < len(plan) else None
            for s in bucket:
                name, dtype, shape = meta[s.index]
                tensor = buf[s.offset:s.offset + s.nbytes].view(getattr(torch, dtype)).reshape(shape)
                yield name, tensor
                for j in named.get(s.index, ()):
                    yield meta[j][0], tensor

    def close(self) -> None:
        pg, self.pg = self.pg, None
        if pg is not None and hasattr(pg, "shutdown"):
            pg.shutdown()
        self.store = None
