"""The sharded policy: how each rank holds the model (FSDP2 or DDP), its full weights for the generation copy,
and checkpoints written shard by shard.

With N > 1 the policy is wrapped in FSDP2 (`fully_shard` per transformer block and at the root: each rank
holds about 1/N of the parameters, gradients and optimizer state) or, as a config choice, in DDP. Sharded
weights cannot generate on their own without collective calls that every rank would have to make in step,
so each rank generates from a full generation copy (rlvr.rollout.policies.weights.GenerationCopy) that is
refreshed from the gathered weights (`full_weights`) after every update, a collective every rank makes at the
same point. Checkpoints are written shard by shard, each rank its own, with torch.distributed.checkpoint
(`save_sharded`, `load_sharded`), or in full on rank 0 (`full_state`, the one-file checkpoint of a run alone).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as tdist
from torch import nn

from rlvr.train.distributed.ranks import Dist

if TYPE_CHECKING:
    from torch.distributed.checkpoint import StorageReader, StorageWriter


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks: modules of the classes its `_no_split_modules` names (every
    transformers model declares them), else the children of its largest ModuleList."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if blocks:
        return blocks
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


COMPUTE_DTYPES: dict[str, torch.dtype | None] = {"no": None, "bf16": torch.bfloat16}
"""What `train.mixed_precision` computes the policy's forward and backward in (None: the weights' own
dtype)."""


def casts_itself(dist: Dist) -> bool:
    """Whether the sharded policy casts its own forward under mixed precision (FSDP2's MixedPrecisionPolicy);
    otherwise (one rank, DDP) the update runs it under autocast."""
    return dist.active and dist.sharding == "fsdp"


def shard(model: nn.Module, dist: Dist, mixed_precision: str = "no") -> nn.Module:
    """The model as this rank trains it: FSDP2 per transformer block and at the root, or DDP; unchanged alone.
    With bf16 FSDP2 gathers each block's float32 shards as bfloat16 for the forward and reduces gradients in
    float32 into the float32 shards that the optimizer steps."""
    if not dist.active:
        return model
    if dist.sharding == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [dist.local_rank] if dist.backend == "nccl" else None
        return DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dtype = COMPUTE_DTYPES[mixed_precision]
    policy = MixedPrecisionPolicy(param_dtype=dtype,
                                  reduce_dtype=torch.float32) if dtype else MixedPrecisionPolicy()
    for block in transformer_blocks(model):
        fully_shard(block, mp_policy=policy)
    # the root holds what is left: embeddings (tied to the head), final norm
    fully_shard(model, mp_policy=policy)
    return model


def unwrapped(model: nn.Module) -> nn.Module:
    """The transformers (or peft) model inside a DDP wrapper; FSDP2 keeps the model itself."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def full_weights(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every rank's full (name, tensor) pairs of a sharded model, names as the unwrapped model's
    state_dict gives them (a collective: every rank calls it at the same point)."""
    from torch.distributed.tensor import DTensor

    out = []
    for k, v in unwrapped(model).state_dict().items():
        out.append((k, (v.full_tensor() if isinstance(v, DTensor) else v).detach()))
    return out


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(model, optimizer) state dicts in full, on rank 0's CPU (empty elsewhere): a collective when sharded
    (the one-file checkpoint of a run alone). The optimizer's is keyed by parameter names, so any world size
    can load it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    if not optimizer.state:  # before the first step: torch would initialise the state by a zero step
        return get_model_state_dict(unwrapped(model), options=opts), {}  # (AdamW's step count would be off)
    return get_state_dict(unwrapped(model), optimizer, options=opts)


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict,
                    optim_state: dict) -> None:
    """Load full state dicts (every rank read them) into a sharded or plain model and its optimizer."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_state_dict

    opts = StateDictOptions(full_state_dict=True)
    if not optim_state:  # saved before the first optimizer step: nothing to load into the fresh optimizer
        set_model_state_dict(unwrapped(model), model_state, options=opts)
        return
    set_state_dict(unwrapped(model), optimizer, model_state_dict=model_state, optim_state_dict=optim_state,
                   options=opts)


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, writer: StorageWriter) -> bool:
    """Write the model and optimizer state as this rank holds them with torch.distributed.checkpoint (a
    collective, nothing gathered): each rank its own FSDP2 shards; a tensor every rank holds in full (DDP) is
    written by one of them. Keyed by parameter name. Returns whether the optimizer state is in it (it has none
    before the first step)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    alone = not tdist.is_initialized()
    if not optimizer.state:  # get_state_dict would initialise the state by a zero step (see full_state)
        dcp.save({"model": get_model_state_dict(unwrapped(model))}, storage_writer=writer, no_dist=alone)
        return False
    model_state, optim_state = get_state_dict(unwrapped(model), optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, storage_writer=writer, no_dist=alone)
    return True


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, reader: StorageReader) -> None:
    """Read a checkpoint `save_sharded` wrote into the model (and the optimizer; None: the weights only) as
    this process holds them: torch.distributed.checkpoint reads each tensor's pieces from whichever files hold
    them, so a checkpoint of any world size loads at any other; a process alone needs no process group."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    alone = not tdist.is_initialized()
    if optimizer is None:
        weights: dict[str, Any] = {"model": get_model_state_dict(unwrapped(model))}
        dcp.load(weights, storage_reader=reader, no_dist=alone)
        set_model_state_dict(unwrapped(model), weights["model"])
        return
    model_state, optim_state = get_state_dict(unwrapped(model), optimizer)  # placeholders that the load fills
    state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, storage_reader=reader, no_dist=alone)
    set_state_dict(unwrapped(model), optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])


def local_numel(model: nn.Module) -> tuple[int, int]:
    """(parameter elements this rank holds, elements of the whole model)."""
    from torch.distributed.tensor import DTensor

    mine = total = 0
    for p in unwrapped(model).parameters():
        total += p.numel()
        mine += p.to_local().numel() if isinstance(p, DTensor) else p.numel()
    return mine, total


def local_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters and optimizer state this rank holds (its shards with FSDP2)."""
    from torch.distributed.tensor import DTensor

    def size(t: torch.Tensor) -> int:
        local = t.to_local() if isinstance(t, DTensor) else t
        return local.numel() * local.element_size()

    params = sum(size(p) for p in unwrapped(model).parameters())
    return params + sum(size(v) for st in optimizer.state.values() for v in st.values()
                        if isinstance(v, torch.Tensor) and v.dim() > 0)
