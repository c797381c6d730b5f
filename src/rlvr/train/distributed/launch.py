"""The Ray launch of a distributed run: `rlvr train CONFIG --cluster ADDRESS` with `[train] world_size = N`.

N plain Ray actors, one per bundle of a placement group (one CPU each, one GPU each where the cluster has
N GPUs), each set the variables torchrun would set (RANK, WORLD_SIZE, MASTER_ADDR/PORT of rank 0's node,
LOCAL_RANK) and run the same `rlvr.run.train` a torchrun rank runs, so both launchers share one code
path (rlvr.train.distributed.ranks). Each rank leases sandboxes from a local pool on its own node, as a
torchrun rank does. When a rank's actor dies, every actor is stopped and the job is started again from the
last checkpoint, up to `MAX_RESTARTS` times (the torchrun `--max-restarts` behaviour); the store never holds a
step twice because a resumed run drops what was recorded after its checkpoint. docs/SCALING.md says why plain
actors rather than Ray Train's TorchTrainer.

What is training's lives here (what a rank runs, the restart rule, which failures are a lost rank); the
cluster's mechanics (connecting, the placement group, starting and killing actors) are rlvr.scale.cluster's.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.config import RunConfig
from rlvr.errors import RankLost, UserError
from rlvr.scale import cluster
from rlvr.train.distributed.ranks import check, launch_env

MAX_RESTARTS = 1
"""Restarts of the whole job after a rank's actor dies."""

LAUNCH_STAND_IN = {"RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
"""What checking a Ray launch pretends about rank 0 (the settings are checked as rank 0's would be)."""


def ray_launch(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process should start the ranks on Ray (`--cluster` and world_size > 1, not a rank itself);
    the settings are checked first, so a bad one is refused before any actor starts."""
    if launch_env(environ) is not None or not cfg.cluster.address or (cfg.train.world_size or 1) == 1:
        return False
    check(cfg, {**LAUNCH_STAND_IN, "WORLD_SIZE": str(cfg.train.world_size)})
    return True


class _Rank:
    """One rank of the job, inside a Ray actor."""

    def address(self) -> tuple[str, int]:
        """This node's address and a free port for the job's rendezvous store (asked of rank 0's actor)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def train(self, train: Callable[..., dict[str, Any]], cfg_json: str, env: dict[str, str],
              resume: bool) -> dict[str, Any]:
        os.environ.update(env)
        import torch

        torch.set_num_threads(1)
        return train(RunConfig.model_validate_json(cfg_json), resume=resume)


def run_on_ray(train: Callable[..., dict[str, Any]], cfg: RunConfig, resume: bool = True) -> dict[str, Any]:
    """`train(cfg, resume=...)` (`rlvr.run.train`, passed in: it imports this module) as
    `train.world_size` ranks on the Ray cluster at `cluster.address`; returns rank 0's summary."""
    n = cfg.train.world_size or 1
    cluster.connect(cfg.cluster.address, forward_logs=True)  # the ranks' progress shows here, on stderr
    gpus = 1 if cluster.resources().get("GPU", 0) >= n else 0
    cluster.require("CPU", n, what=f"{n} ranks", field="train.world_size",
                    fix="lower world_size or add nodes")
    rank_cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"address": None})})
    with cluster.bundles([{"CPU": 1, **({"GPU": 1} if gpus else {})}] * n, strategy="PACK") as group:
        for attempt in range(MAX_RESTARTS + 1):
            ranks = [cluster.start(_Rank, strategy=cluster.in_bundle(group, i), num_cpus=1, num_gpus=gpus)
                     for i in range(n)]
            try:
                return _attempt(ranks, train, rank_cfg, resume or attempt > 0, attempt)
            except RankLost:
                if attempt == MAX_RESTARTS:
                    raise
            finally:
                cluster.stop(ranks, method=None)
    raise AssertionError("unreachable")


def _attempt(ranks: list[Any], train: Callable[..., dict[str, Any]], cfg: RunConfig, resume: bool,
             attempt: int) -> dict[str, Any]:
    import ray

    host, port = ray.get(ranks[0].address.remote())
    n = len(ranks)
    refs = [r.train.remote(train, cfg.model_dump_json(), {
        "RANK": str(i), "LOCAL_RANK": "0", "WORLD_SIZE": str(n), "MASTER_ADDR": host,
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": str(attempt)}, resume) for i, r in enumerate(ranks)]
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(done[0])
        except cluster.actor_faults() as exc:
            raise RankLost(f"rank {refs.index(done[0])} of {n} died ({type(exc).__name__})") from None
        except ray.exceptions.RayTaskError as exc:
            inner = cluster.cause(exc)
            if isinstance(inner, (UserError, RankLost)):
                raise inner from None
            raise
    return ray.get(refs[0])
