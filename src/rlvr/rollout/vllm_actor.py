"""One vLLM engine on a Ray node: what runs at the far end of disaggregated generation (`[policy] engines = K`).

An `EngineActor` (started by rlvr.rollout.vllm_fleet through rlvr.scale.cluster, with one GPU or, on CPU, one CPU)
holds a `NodeEngine`: VLLMPolicy's own in-process engine (same options, same sampling, the same `Completion`
records with token ids and behaviour log-probs) whose weights change only by what the trainer broadcasts over the
weight-sync group (rlvr.rollout.weight_sync). Joining and receiving run inside the engine's vLLM workers, as
functions sent by `collective_rpc`, so that with tensor parallelism every worker of an engine holds its own end
of the group and receives for itself. Receiving loads each bucket with vLLM's in-place `reload_weights` as it
arrives, then resets the prefix cache and records the version.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.rollout.vllm import VLLMPolicy
from rlvr.rollout.weight_sync import Aliases, Meta, WeightGroup


# --------------------------------------------------------------------------- inside the engine's workers
def _worker_join(worker: Any, host: str, port: int, first_rank: int, world_size: int, backend: str) -> int:
    """Run by `collective_rpc` on each vLLM worker of an engine: worker j of the engine is rank first_rank + j."""
    rank = first_rank + int(getattr(worker, "rank", 0))
    device = str(worker.device) if backend == "nccl" else "cpu"
    worker.rlvr_weight_group = WeightGroup.open(host, port, rank, world_size, backend, device)
    return rank


def _worker_receive(worker: Any, meta: Meta, aliases: Aliases) -> None:
    """Run by `collective_rpc` on each vLLM worker: receive the broadcast weights and load them in place."""
    stream = worker.rlvr_weight_group.receive(meta, aliases)
    try:
        worker.reload_weights(weights_iterator=stream)
    finally:
        for _ in stream:  # a loader that stopped early still takes every bucket: the trainer's broadcasts end
            pass


# ------------------------------------------------------------------------------------------- the engine
class NodeEngine(VLLMPolicy):
    """VLLMPolicy's in-process engine on an engine node; its weights change only by `receive`."""

    def __init__(self, model: str | Path, *, engine_tp: int = 1, **kw: Any) -> None:
        self.engine_tp = engine_tp
        if engine_tp > 1:  # the engine's workers are its own processes, one GPU each, on this actor's GPUs
            kw["engine_options"] = {"tensor_parallel_size": engine_tp, "distributed_executor_backend": "mp"}
        super().__init__(model, **kw)
        self.auto_sync = False  # `.model` (a trainer copy) is never loaded on an engine node

    def join(self, host: str, port: int, first_rank: int, world_size: int, backend: str) -> list[int]:
        return self._llm.collective_rpc(_worker_join, args=(host, port, first_rank, world_size, backend))

    def receive(self, meta: Meta, version: int, aliases: Aliases | None = None) -> None:
        with self._lock:
            self._llm.collective_rpc(_worker_receive, args=(meta, aliases or {}))
            self._llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
            self.engine_version = version


class EngineActor:
    """One engine on a Ray node (a plain class: rlvr.scale.cluster.start makes it an actor; see
    rlvr.rollout.vllm_fleet for placement)."""

    def __init__(self) -> None:
        self.engine: NodeEngine | None = None

    def start(self, model: str, options: dict[str, Any]) -> dict[str, Any]:
        """Start the engine (the first token included); its node, device and version."""
        import ray

        self.engine = NodeEngine(model, **options)
        return {"node": ray.util.get_node_ip_address(), "version": self.engine.engine_version,
                "gpus": ray.get_gpu_ids()}

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> tuple[int, list[Completion]]:
        """Completions of token-id prompts, as VLLMPolicy gives them, and the version that sampled them."""
        assert self.engine is not None
        comps = self.engine.generate([[] for _ in prompt_token_ids], params, prompt_token_ids=prompt_token_ids)
        return self.engine.engine_version, comps

    def init_weight_group(self, host: str, port: int, rank: int, world_size: int, backend: str) -> list[int]:
        """Join the trainer's weight-sync group: this engine's workers become ranks rank, rank + 1, ..."""
        assert self.engine is not None
        return self.engine.join(host, port, rank, world_size, backend)

    def receive_weights(self, meta: Meta, version: int, aliases: Aliases | None = None) -> float:
        """Receive the weights the trainer broadcasts (`aliases`: the names that are an earlier tensor, not sent
        again) and generate with them from now on; seconds taken."""
        assert self.engine is not None
        t0 = time.perf_counter()
        self.engine.receive(meta, version, aliases)
        return time.perf_counter() - t0

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
