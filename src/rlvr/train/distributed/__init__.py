"""Training past one device: the ranks of one torch.distributed job, how they split a step, the sharded policy
they hold, and how Ray starts them.

A run is N ranks (torchrun's `RANK`/`WORLD_SIZE`/`MASTER_ADDR`/`MASTER_PORT`, or Ray actors that set the same
variables, `launch`). Rank 0 owns the scheduler, the store and the monitor: it samples the step's batch once
and broadcasts it; every rank runs a contiguous share of its groups (a group never spans ranks, so advantages
and zero-variance filtering stay per group); the episodes go to rank 0 exactly once (`gather_object`), which
computes the groups, advantages and update samples as a single process would and broadcasts the samples. Each
optimizer step then splits its (global) chunk of samples across the ranks, and each rank's loss is divided by
the chunk's global token count (rlvr.train.update), so the summed gradients are the gradient one rank would
compute from the same episodes.

- `ranks`: this process's place in the job (`Dist`, `init`), the object collectives, the launch's refusals;
- `sharding`: FSDP2 or DDP around the policy, its full weights, sharded and full checkpoints;
- `launch`: the Ray launch of the ranks (`--cluster` with world_size > 1) and its restarts, on the cluster
  mechanics of rlvr.scale.cluster. torchrun needs nothing here: its ranks simply `init`.

The names below are this package's interface; the modules are how it is kept.
"""
from __future__ import annotations

from rlvr.train.distributed.launch import LAUNCH_STAND_IN, MAX_RESTARTS, ray_launch, run_on_ray
from rlvr.train.distributed.ranks import (
    LAUNCH_VARS,
    SINGLE,
    TIMEOUT,
    Dist,
    backend_for,
    check,
    init,
    launch_env,
    world_size,
)
from rlvr.train.distributed.sharding import (
    COMPUTE_DTYPES,
    casts_itself,
    full_state,
    full_weights,
    load_full_state,
    load_sharded,
    local_numel,
    local_state_bytes,
    save_sharded,
    shard,
    transformer_blocks,
    unwrapped,
)

__all__ = [
    "COMPUTE_DTYPES", "LAUNCH_STAND_IN", "LAUNCH_VARS", "MAX_RESTARTS", "SINGLE", "TIMEOUT", "Dist",
    "backend_for",
    "casts_itself", "check", "full_state", "full_weights", "init", "launch_env", "load_full_state",
    "load_sharded", "local_numel", "local_state_bytes", "ray_launch", "run_on_ray", "save_sharded", "shard",
    "transformer_blocks", "unwrapped", "world_size",
]
