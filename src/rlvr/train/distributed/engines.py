"""Engines with several trainer ranks: N FSDP2 (or DDP) ranks feeding the K vLLM engines of `[policy] engines
= K` (rlvr.rollout.fleet.engines), the weights gathered once per update and broadcast to every engine.

Who does what. Rank 0 alone holds the `EnginesPolicy` (the tokenizer, its share of the sharded model, the
engine fleet) and runs every rollout of a step through the engines: generation is off the trainers anyway, so
nothing is gained by splitting it over the ranks, and one caller keeps the fleet's scaling, replacement and
versions as they are for a run alone. The other ranks hold a plain `hf` policy over the same model files
(their tokenizer, and the model they train, loaded alike on every rank) and never start an engine, generate or
touch the Ray fleet of engines. The update is the one of rlvr.train.distributed: rank 0 turns the step's
episodes into samples and broadcasts them, and every rank steps on its share of each optimizer step's chunk,
so the episodes need no scattering back to the ranks.

After each update (`EngineSync.sync`, from `Trainer.sync_generation` at the points every rank reaches
together) every rank takes part in gathering the full weights once: FSDP2's full state dict, onto rank 0's CPU
only (nothing moves under DDP, where every rank holds the whole model). Rank 0 loads them into its full copy
of the trained model, made before sharding (the peft model under LoRA), and syncs the engines from that copy
exactly as a run alone syncs from its own model: under LoRA only the adapter, otherwise the full weights minus
the frozen tensors the engines already hold. Then every rank passes a barrier. Whether a sync is due is
decided from the policy version, which every rank holds alike, so every rank enters the gather or none does.

Left out, and refused in one line: asynchronous mode (`train.max_staleness >= 1`) on several ranks and an
in-process vllm engine per rank (`policy.engines = 0`), by rlvr.train.distributed.ranks; ranks started by Ray
(`--cluster` with `world_size > 1`), whose config drops the cluster address the engines need, by
`refuse_ray_launch`. Launch the ranks with torchrun. The feed of such a run is `rlvr.train.feed.EngineFeed`.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlvr.config import RunConfig
from rlvr.errors import UserError
from rlvr.train.distributed.ranks import Dist
from rlvr.train.distributed.sharding import unwrapped


def with_engines(cfg: RunConfig, dist: Dist) -> bool:
    """Whether this run trains on several ranks and generates on engine actors."""
    return dist.active and bool(cfg.policy.engines)


def refuse_ray_launch(cfg: RunConfig) -> None:
    """Engines with ranks that Ray starts are not built: refused before any actor starts."""
    if cfg.policy.engines:
        raise UserError("engines with trainer ranks started by Ray (--cluster and world_size > 1) "
                        "are not built",
                        field="policy.engines",
                        fix="launch the ranks with `torchrun --nproc-per-node N -m rlvr "
                        "train CONFIG` and keep [cluster] address for the engines")


def rank_config(cfg: RunConfig, dist: Dist) -> RunConfig:
    """The config this rank opens its policy from: the run's, except on a rank > 0 of a run with engines,
    which opens the same model with the hf backend and no engines."""
    if dist.main or not with_engines(cfg, dist):
        return cfg
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"backend": "hf", "engines": 0})})


class EngineSync:
    """Every rank's part in feeding the engines from the sharded weights (see the module docstring)."""

    def __init__(self, dist: Dist, full: Any | None, version: int) -> None:
        self.dist = dist
        self.full = full
        """Rank 0's full (unsharded) copy of the trained model under FSDP2; None elsewhere and under DDP."""
        self.version = version
        """The policy version the engines hold, tracked alike on every rank."""

    @classmethod
    def before_sharding(cls, policy: Any, dist: Dist) -> EngineSync:
        """Set up on the policy whose `.model` is about to be sharded (LoRA already applied)."""
        full = None
        if dist.main:
            # the engines change only when this syncs them: `.model` is to be sharded
            policy.separate_weights()
            if dist.sharding == "fsdp":
                full = copy.deepcopy(policy.model)  # requires_grad kept: frozen tensors are found as alone
        return cls(dist, full, policy.version)

    def sync(self, policy: Any) -> float | None:
        """Bring the engines to `policy.version` when behind (a collective every rank makes at the same
        point); seconds taken, or None when they were current."""
        if self.version == policy.version:
            return None
        t0 = time.perf_counter()
        trained = self._gathered(policy.model)
        if self.dist.main:
            with _serving(policy, trained):
                policy.sync_weights(version=policy.version)
        self.version = policy.version
        self.dist.barrier()  # no rank runs ahead of engines that may still be loading
        return time.perf_counter() - t0

    def _gathered(self, model: Any) -> Any:
        """The full trained model on rank 0 (None elsewhere): FSDP2's full state gathered into `full`, or the
        model itself under DDP."""
        if self.dist.sharding != "fsdp":
            return unwrapped(model) if self.dist.main else None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)  # on rank 0's CPU only
        state = get_model_state_dict(unwrapped(model), options=opts)
        if self.full is None:
            return None
        self.full.load_state_dict(state)
        return self.full


@contextmanager
def _serving(policy: Any, model: Any) -> Iterator[None]:
    """`model` as the policy's trainer model for one sync: the policy reads the weights (and, under LoRA, the
    adapter) it sends from `.model`, which here is the sharded one."""
    trained = policy.model
    policy.model = model
    try:
        yield
    finally:
        policy.model = trained
