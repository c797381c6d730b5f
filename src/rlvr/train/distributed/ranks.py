"""The ranks of one torch.distributed job: who this process is in it, the object collectives the loop uses,
and the refusals of a launch that cannot run.

A run is N ranks (torchrun's `RANK`/`WORLD_SIZE`/`MASTER_ADDR`/`MASTER_PORT`, or Ray actors that set the same
variables, rlvr.train.distributed.launch). `init` joins the job (a single process: `SINGLE`, no process
group); `check` refuses, on every rank and before any work, settings the ranks cannot run. The collectives are
torch.distributed's own (gloo on CPU, nccl on GPU); nothing here is a home-made launcher or transport.
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
from typing import Any, TypeVar

import torch
import torch.distributed as tdist

from rlvr.config import RunConfig
from rlvr.errors import RankLost, UserError

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
            raise RankLost(f"rank {self.rank} of {self.world_size}: {what} failed because another "
                           f"rank is gone ({first}); the launcher's report names it; resume restarts "
                           f"from the last "
                           "checkpoint (torchrun --max-restarts does so by itself)") from None

    @property
    def device(self) -> torch.device:
        """Where this rank's collectives run: its GPU with nccl, else the CPU."""
        return torch.device("cuda",
                            torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def share(self, n: int) -> range:
        """The contiguous indices of `n` groups (n divisible by the world size) that this rank runs."""
        k = n // self.world_size
        return range(self.rank * k, (self.rank + 1) * k)

    def micro_batches(self, chunk: Sequence[T], size: int) -> list[tuple[list[T], bool]]:
        """This rank's micro-batches of an optimizer step's `chunk` (every rank holds the same chunk): its
        share `chunk[rank::world]` in `size`-long pieces, padded with (dummy, False) entries so that every
        rank runs as many forward/backward passes as the busiest one (FSDP2 and DDP collectives must pair up).
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
        raise UserError(f"torch.distributed variables half set: {', '.join(present)} without "
                        f"{', '.join(missing)}",
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
    """The run's world size: `train.world_size`, checked against the launcher's (unset: as launched, else
    1)."""
    env = launch_env(environ)
    launched = int(env["WORLD_SIZE"]) if env else None
    want = cfg.train.world_size
    if launched is not None and want is not None and want != launched:
        raise UserError(f"world_size is {want} but the launcher started {launched} ranks",
                        field="train.world_size",
                        fix=f"set train.world_size = {launched}, or launch --nproc-per-node {want}")
    if launched is None and want is not None and want > 1 and not cfg.cluster.address:
        raise UserError(f"world_size = {want} needs a launcher", field="train.world_size",
                        fix=f"run `torchrun --nproc-per-node {want} -m rlvr train CONFIG`, or add "
                            f"--cluster ADDRESS")
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
    # engine actors: rlvr.train.distributed.engines
    if cfg.policy.backend == "vllm" and not cfg.policy.engines:
        raise UserError("an in-process vllm engine does not run on several ranks", field="policy.engines",
                        fix="set policy.engines = K (engines as Ray actors), or backend = \"hf\"")
    if cfg.policy.backend not in ("hf", "vllm"):
        raise UserError(f"the {cfg.policy.backend!r} backend does not train on several ranks",
                        field="policy.backend",
                        fix='use backend = "hf", or "vllm" with engines, with world_size > 1')
    if cfg.train.max_staleness > 0:
        raise UserError("asynchronous rollouts (max_staleness >= 1) do not run on several ranks yet",
                        field="train.max_staleness", fix="set it to 0 with world_size > 1")
    return n


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
        tdist.init_process_group(backend, store=_store(env, rank, n), rank=rank, world_size=n,
                                 timeout=TIMEOUT)
    _report_sigterm(rank, n)
    return Dist(rank=rank, world_size=n, backend=backend, local_rank=local, sharding=cfg.train.sharding)


def _report_sigterm(rank: int, n: int) -> None:
    """A launcher that sees one rank die stops the others with SIGTERM, often while they compute rather than
    wait in a collective: such a rank says so in one line (unless it already reported the lost peer) and exits
    1, instead of vanishing without a word. Only from the main thread, where Python can install handlers."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stopped(signum: int, frame: object) -> None:
        if not RankLost.reported:
            sys.stderr.write(f"error: rank {rank} of {n}: stopped by the launcher (SIGTERM): another "
                             f"rank is gone "
                             "or the job was stopped; resume restarts from the last checkpoint (torchrun "
                             "--max-restarts does so by itself)\n")
            sys.stderr.flush()
        os._exit(1)

    signal.signal(signal.SIGTERM, stopped)


def _store(env: Mapping[str, str], rank: int, n: int) -> tdist.Store:
    """The rendezvous store at MASTER_ADDR:MASTER_PORT (torchrun's agent hosts it; else rank 0), under a
    prefix per restart: after `--max-restarts` brings the ranks back, the addresses the dead attempt left in
    the agent's store must not be read (a new rank would dial a dead one)."""
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = tdist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), n, is_master=not agent and rank == 0,
                           timeout=TIMEOUT, multi_tenant=not agent)
    return tdist.PrefixStore(f"rlvr/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
