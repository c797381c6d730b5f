"""The Ray launcher of a distributed run: `rlvr train CONFIG --cluster ADDRESS` with `[train] world_size = N`.

N plain Ray actors, one per bundle of a placement group (one CPU each, one GPU each where the cluster has
N GPUs), each set the variables torchrun would set (RANK, WORLD_SIZE, MASTER_ADDR/PORT of rank 0's node,
LOCAL_RANK) and run the same `rlvr.train.loop.run` a torchrun rank runs, so both launchers share one code
path (rlvr.train.distributed). Each rank leases sandboxes from a local pool on its own node, as a torchrun
rank does. When a rank's actor dies, every actor is stopped and the job is started again from the last
checkpoint, up to `MAX_RESTARTS` times (the torchrun `--max-restarts` behaviour); the store never holds a step
twice because a resumed run drops what was recorded after its checkpoint. docs/SCALING.md says why plain
actors rather than Ray Train's TorchTrainer.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from rlvr.config import RunConfig
from rlvr.errors import RankLost, UserError

MAX_RESTARTS = 1
"""Restarts of the whole job after a rank's actor dies."""


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
    """`train(cfg, resume=...)` (rlvr.train.loop.run, passed in so that scale never imports train) as
    `train.world_size` ranks on the Ray cluster at `cluster.address`; returns rank 0's summary."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    n = cfg.train.world_size or 1
    if not ray.is_initialized():
        try:
            ray.init(address=cfg.cluster.address, ignore_reinit_error=True)  # ranks print their progress here
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise UserError(f"cannot connect to the Ray cluster at {cfg.cluster.address!r}: {exc}",
                            field="cluster.address", fix="start it with `ray start --head`") from None
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= n else 0
    if ray.cluster_resources().get("CPU", 0) < n:
        raise UserError(f"the Ray cluster has fewer than {n} CPUs for {n} ranks", field="train.world_size",
                        fix="lower world_size or add nodes")
    rank_cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"address": None})})
    group = placement_group([{"CPU": 1, **({"GPU": 1} if gpus else {})}] * n, strategy="PACK")
    ray.get(group.ready())
    actor = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=0)(_Rank)
    try:
        for attempt in range(MAX_RESTARTS + 1):
            ranks = [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=i)).remote() for i in range(n)]
            try:
                return _attempt(ray, ranks, train, rank_cfg, resume or attempt > 0, attempt)
            except RankLost:
                if attempt == MAX_RESTARTS:
                    raise
            finally:
                for r in ranks:
                    ray.kill(r)
        raise AssertionError("unreachable")
    finally:
        remove_placement_group(group)


def _attempt(ray: Any, ranks: list[Any], train: Callable[..., dict[str, Any]], cfg: RunConfig, resume: bool,
             attempt: int) -> dict[str, Any]:
    host, port = ray.get(ranks[0].address.remote())
    n = len(ranks)
    refs = [r.train.remote(train, cfg.model_dump_json(), {
        "RANK": str(i), "LOCAL_RANK": "0", "WORLD_SIZE": str(n), "MASTER_ADDR": host, "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": str(attempt)}, resume) for i, r in enumerate(ranks)]
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(done[0])
        except ray.exceptions.RayActorError as exc:
            raise RankLost(f"rank {refs.index(done[0])} of {n} died ({type(exc).__name__})") from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else None
            if isinstance(cause, (UserError, RankLost)):
                raise cause from None
            raise
    return ray.get(refs[0])
