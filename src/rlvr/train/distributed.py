"""Training past one device: the ranks of one torch.distributed job, how they split a step, and the sharded
policy they hold.

A run is N ranks (torchrun's `RANK`/`WORLD_SIZE`/`MASTER_ADDR`/`MASTER_PORT`, or Ray workers that set the
same variables, rlvr.scale.ray_train). Rank 0 owns the scheduler, the store and the monitor: it samples the
step's batch once and broadcasts it; every rank runs a contiguous share of its groups (a group never spans
ranks, so advantages and zero-variance filtering stay per group); the episodes go to rank 0 exactly once
(`gather_object`), which computes the groups, advantages and update samples as a single process would and
broadcasts the samples. Each optimizer step then splits its (global) chunk of samples across the ranks, and
each rank's loss is divided by the chunk's global token count (rlvr.train.update), so the summed gradients
are the gradient one rank would compute from the same episodes.

With N > 1 the policy is wrapped in FSDP2 (`fully_shard` per transformer block and at the root: each rank
holds about 1/N of the parameters, gradients and optimizer state) or, as a config choice, in DDP. Sharded
weights cannot generate on their own without collective calls that every rank would have to make in step,
so each rank generates from a full generation copy (rlvr.rollout.weights.GenerationCopy) that is refreshed
from the gathered weights after every update, a collective every rank makes at the same point. Checkpoints are
written shard by shard, each rank its own, with torch.distributed.checkpoint (`save_sharded`, `load_sharded`).

The collectives are torch.distributed's own (gloo on CPU, nccl on GPU); nothing here is a home-made
launcher or transport.
"""
from __future__ import annotations

import datetime
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as tdist
from torch import nn

from rlvr.config import RunConfig
from rlvr.errors import RankLost, UserError

if TYPE_CHECKING:
    from torch.distributed.checkpoint import StorageReader, StorageWriter

T = TypeVar("T")

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""The variables torchrun (or the Ray launcher) sets for every rank; all or none must be present."""

TIMEOUT = datetime.timedelta(hours=2)
"""How long a collective waits for the other ranks. Held-out evaluation runs on rank 0 alone while the others
wait in the next collective, so this bounds a held-out pass too; a dead rank is noticed sooner, when its
connections close."""


@dataclass(frozen=True)
class Dist:
    """This process's place in the job, and the object collectives the loop uses (identity when alone)."""

    rank: int = 0
    world_size: int = 1
    backend: str | None = None
    """gloo or nccl; None: a single process with no process group."""
    local_rank: int = 0
    sharding: str = "none"
    """fsdp, ddp, or none (one rank)."""

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def broadcast(self, obj: T) -> T:
        """Rank 0's `obj` on every rank."""
        if not self.active:
            return obj
        box = [obj if self.main else None]
        with self.collective("broadcast"):
            tdist.broadcast_object_list(box, src=0)
        return box[0]  # type: ignore[return-value]

    def gather(self, obj: T) -> list[T] | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        if not self.active:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.main else None
        with self.collective("gather"):
            tdist.gather_object(obj, out, dst=0)
        return out

    def all_gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world_size
        with self.collective("all_gather"):
            tdist.all_gather_object(out, obj)
        return out

    def sum(self, value: float) -> float:
        """The sum of `value` over the ranks (float64, so a loss adds up the same on every rank)."""
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        with self.collective("all_reduce"):
            tdist.all_reduce(t)
        return float(t.item())

    def barrier(self) -> None:
        if self.active:
            with self.collective("barrier"):
                tdist.barrier()

    @contextmanager
    def collective(self, what: str) -> Iterator[None]:
        """A failed collective of a live job means a peer rank is gone: one line saying so (the launcher's
        report names the rank that died and its exit code), never a backend traceback. Alone: no change."""
        if not self.active:
            yield
            return
        try:
            yield
        except RuntimeError as exc:  # gloo and nccl raise DistBackendError, a RuntimeError
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise RankLost(f"rank {self.rank} of {self.world_size}: {what} failed because another rank is gone "
                           f"({first}); the launcher's report names it; resume restarts from the last "
                           "checkpoint (torchrun --max-restarts does so by itself)") from None

    @property
    def device(self) -> torch.device:
        """Where this rank's collectives run: its GPU with nccl, else the CPU."""
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def share(self, n: int) -> range:
        """The contiguous indices of `n` groups (n divisible by the world size) that this rank runs."""
        k = n // self.world_size
        return range(self.rank * k, (self.rank + 1) * k)

    def micro_batches(self, chunk: Sequence[T], size: int) -> list[tuple[list[T], bool]]:
        """This rank's micro-batches of an optimizer step's `chunk` (every rank holds the same chunk): its
        share `chunk[rank::world]` in `size`-long pieces, padded with (dummy, False) entries so that every rank
        runs as many forward/backward passes as the busiest one (FSDP2 and DDP collectives must pair up).
        A dummy is one real sample whose loss the caller multiplies by 0."""
        if not self.active:
            return [(list(chunk[i:i + size]), True) for i in range(0, len(chunk), size)]
        mine = list(chunk[self.rank::self.world_size])
        per_rank = -(-len(chunk) // self.world_size)  # ceil: the busiest rank's share
        most = -(-per_rank // size)
        out = [(mine[i * size:(i + 1) * size], True) for i in range(most) if mine[i * size:(i + 1) * size]]
        out += [([chunk[0]], False)] * (most - len(out))
        return out

    def close(self) -> None:
        if self.active and tdist.is_initialized():
            tdist.destroy_process_group()


SINGLE = Dist()
"""The one process of an undistributed run."""


# --------------------------------------------------------------------------------------------- checks
def launch_env(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The launcher's variables (None when this process was not started as a rank); half set is refused."""
    environ = os.environ if environ is None else environ
    present = [v for v in LAUNCH_VARS if environ.get(v)]
    if not present:
        return None
    missing = [v for v in LAUNCH_VARS if v not in present]
    if missing:
        raise UserError(f"torch.distributed variables half set: {', '.join(present)} without {', '.join(missing)}",
                        field="environment",
                        fix="launch with `torchrun --nproc-per-node N -m rlvr train CONFIG`, or unset them")
    bad = [v for v in ("RANK", "WORLD_SIZE", "MASTER_PORT", "LOCAL_RANK") if v in environ
           and not environ[v].isdigit()]
    if bad:
        raise UserError(f"{bad[0]}={environ[bad[0]]!r} is not a number", field="environment",
                        fix="let torchrun set it")
    if int(environ["RANK"]) >= int(environ["WORLD_SIZE"]):
        raise UserError(f"RANK {environ['RANK']} is not below WORLD_SIZE {environ['WORLD_SIZE']}",
                        field="environment", fix="let torchrun set it")
    return {v: environ[v] for v in (*LAUNCH_VARS, "LOCAL_RANK") if v in environ}


def world_size(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> int:
    """The run's world size: `train.world_size`, checked against the launcher's (unset: as launched, else 1)."""
    env = launch_env(environ)
    launched = int(env["WORLD_SIZE"]) if env else None
    want = cfg.train.world_size
    if launched is not None and want is not None and want != launched:
        raise UserError(f"world_size is {want} but the launcher started {launched} ranks",
                        field="train.world_size",
                        fix=f"set train.world_size = {launched}, or launch --nproc-per-node {want}")
    if launched is None and want is not None and want > 1 and not cfg.cluster.address:
        raise UserError(f"world_size = {want} needs a launcher", field="train.world_size",
                        fix=f"run `torchrun --nproc-per-node {want} -m rlvr train CONFIG`, or add --cluster ADDRESS")
    return launched or want or 1


def backend_for(cfg: RunConfig) -> str:
    """`train.dist_backend`, or from the device: nccl where the policy runs on CUDA, else gloo."""
    cuda = torch.cuda.is_available() and cfg.policy.device != "cpu"
    choice = cfg.train.dist_backend
    if choice == "auto":
        return "nccl" if cuda else "gloo"
    if choice == "nccl" and not cuda:
        raise UserError("the nccl backend needs CUDA, which this machine or policy.device does not give",
                        field="train.dist_backend", fix='use "gloo" (or "auto")')
    return choice


def check(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> int:
    """Refuse, before any rank does work, a distributed setting that cannot run; returns the world size."""
    n = world_size(cfg, environ)
    backend_for(cfg)
    if n == 1:
        return n
    if cfg.train.batch_size % n:
        raise UserError(f"batch_size {cfg.train.batch_size} does not split into {n} equal shares of groups",
                        field="train.batch_size", fix=f"use a multiple of the world size {n}")
    if cfg.policy.backend != "hf":
        raise UserError(f"the {cfg.policy.backend!r} backend does not train on several ranks",
                        field="policy.backend", fix='use backend = "hf" with world_size > 1')
    if cfg.train.max_staleness > 0:
        raise UserError("asynchronous rollouts (max_staleness >= 1) do not run on several ranks yet",
                        field="train.max_staleness", fix="set it to 0 with world_size > 1")
    return n


def ray_launch(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process should start the ranks on Ray (`--cluster` and world_size > 1, not a rank itself);
    the settings are checked first, so a bad one is refused before any actor starts."""
    if launch_env(environ) is not None or not cfg.cluster.address or (cfg.train.world_size or 1) == 1:
        return False
    check(cfg, {**LAUNCH_STAND_IN, "WORLD_SIZE": str(cfg.train.world_size)})
    return True


LAUNCH_STAND_IN = {"RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
"""What checking a Ray launch pretends about rank 0 (the settings are checked as rank 0's would be)."""


def init(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> Dist:
    """Join the job this process was launched into (a single process: SINGLE, no process group)."""
    n = check(cfg, environ)
    if n == 1:
        return SINGLE
    env = launch_env(environ) or {}
    backend = backend_for(cfg)
    rank = int(env["RANK"])
    local = int(env.get("LOCAL_RANK", env["RANK"]))
    if backend == "nccl":
        torch.cuda.set_device(local)  # `cuda` (policy.device auto) then means this rank's GPU
    if not tdist.is_initialized():
        tdist.init_process_group(backend, store=_store(env, rank, n), rank=rank, world_size=n, timeout=TIMEOUT)
    _report_sigterm(rank, n)
    return Dist(rank=rank, world_size=n, backend=backend, local_rank=local, sharding=cfg.train.sharding)


def _report_sigterm(rank: int, n: int) -> None:
    """A launcher that sees one rank die stops the others with SIGTERM, often while they compute rather than wait
    in a collective: such a rank says so in one line (unless it already reported the lost peer) and exits 1,
    instead of vanishing without a word. Only from the main thread, where Python can install handlers."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stopped(signum: int, frame: object) -> None:
        if not RankLost.reported:
            sys.stderr.write(f"error: rank {rank} of {n}: stopped by the launcher (SIGTERM): another rank is gone "
                             "or the job was stopped; resume restarts from the last checkpoint (torchrun "
                             "--max-restarts does so by itself)\n")
            sys.stderr.flush()
        os._exit(1)

    signal.signal(signal.SIGTERM, stopped)


def _store(env: Mapping[str, str], rank: int, n: int) -> tdist.Store:
    """The rendezvous store at MASTER_ADDR:MASTER_PORT (torchrun's agent hosts it; else rank 0), under a prefix
    per restart: after `--max-restarts` brings the ranks back, the addresses the dead attempt left in the
    agent's store must not be read (a new rank would dial a dead one)."""
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = tdist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), n, is_master=not agent and rank == 0,
                           timeout=TIMEOUT, multi_tenant=not agent)
    return tdist.PrefixStore(f"rlvr/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


# --------------------------------------------------------------------------------------- sharded policy
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
"""What `train.mixed_precision` computes the policy's forward and backward in (None: the weights' own dtype)."""


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
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype else MixedPrecisionPolicy()
    for block in transformer_blocks(model):
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)  # the root holds what is left: embeddings (tied to the head), final norm
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
    """(model, optimizer) state dicts in full, on rank 0's CPU (empty elsewhere): a collective when sharded (the
    one-file checkpoint of a run alone). The optimizer's is keyed by parameter names, so any world size can load
    it."""
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
    set_state_dict(unwrapped(model), optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


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
