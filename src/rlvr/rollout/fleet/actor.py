"""One vLLM engine on a Ray node: what runs at the far end of disaggregated generation (`[policy] engines =
K`).

An `EngineActor` (started by rlvr.rollout.fleet.members through rlvr.scale.cluster, with one GPU or, on CPU,
one CPU) holds a `NodeEngine`: VLLMPolicy's own in-process engine (same options, same sampling, the same
`Completion` records with token ids and behaviour log-probs) whose weights change only by what the trainer
broadcasts over the weight-sync group (rlvr.rollout.fleet.weight_sync). Joining and receiving run inside the
engine's vLLM workers, as functions sent by `collective_rpc`, so that with tensor parallelism every worker of
an engine holds its own end of the group and receives for itself.

Two ways weights arrive:
- weights (`receive`): each bucket is loaded with vLLM's in-place `reload_weights` as it arrives; a partial
  sync (the trainer skipped whole unchanged blocks) leaves the other layers as they were;
- a LoRA adapter (`receive_adapter`, engines started with `lora_rank`): the first adapter (and one whose
  config or tensor names and shapes differ from the one served) is written as a PEFT adapter directory on this
  node (tmpfs where there is one) and loaded by vLLM's own LoRA support as a new `LoRARequest` that every
  later generate call uses; the previous adapter is removed. A later adapter of the same form replaces the
  served one in the engine's workers, from memory (`_worker_update_adapter`), under the same request. The base
  weights stay the model directory's, which is what the trainer's adapters sit on.
Either way the prefix cache is reset and the version recorded.
"""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlvr.atomic import atomic_path
from rlvr.errors import UserError
from rlvr.rollout.fleet.weight_sync import Aliases, Meta, WeightGroup
from rlvr.rollout.policies.vllm import VLLMPolicy
from rlvr.rollout.policy import Completion, SamplingParams

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM accepts as `max_lora_rank`."""
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload"
"""vLLM's in-place reload warns of every layer a partial sync did not touch: quiet while one runs."""


def max_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of `rank`."""
    for r in LORA_RANKS:
        if r >= rank:
            return r
    raise UserError(f"LoRA rank {rank} is above vLLM's largest, {LORA_RANKS[-1]}",
                    field="policy.engine_lora_rank",
                    fix=f"use a rank of at most {LORA_RANKS[-1]}")


def scratch_dir() -> str | None:
    """Where adapters are written: tmpfs when the node has it (nothing touches a disk), else the temp dir."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


# --------------------------------------------------------------------------- inside the engine's workers
def _worker_join(worker: Any, host: str, port: int, first_rank: int, world_size: int, backend: str,
                 prefix: str) -> int:
    """Run by `collective_rpc` on each vLLM worker of an engine: worker j of the engine is rank first_rank + j
    (a group it was in before is left first: the group is rebuilt whenever the fleet changes)."""
    old = getattr(worker, "rlvr_weight_group", None)
    if old is not None:
        old.close()
    rank = first_rank + int(getattr(worker, "rank", 0))
    device = str(worker.device) if backend == "nccl" else "cpu"
    worker.rlvr_weight_group = WeightGroup.open(host, port, rank, world_size, backend, device, prefix=prefix)
    return rank


def _worker_receive(worker: Any, meta: Meta, aliases: Aliases) -> None:
    """Run by `collective_rpc` on each vLLM worker: receive the broadcast weights and load them in place."""
    stream = worker.rlvr_weight_group.receive(meta, aliases)
    try:
        worker.reload_weights(weights_iterator=stream)
    finally:
        for _ in stream:  # a loader that stopped early still takes every bucket: the trainer's broadcasts end
            pass


def _worker_receive_adapter(worker: Any, meta: Meta, aliases: Aliases, directory: str, config: dict) -> None:
    """Run by `collective_rpc` on each vLLM worker: receive the adapter's tensors; the engine's first worker
    writes them as a PEFT adapter directory (the others share its node and read that one)."""
    pairs = list(worker.rlvr_weight_group.receive(meta, aliases))
    if int(getattr(worker, "rank", 0)) == 0:
        write_safetensors(Path(directory) / "adapter_model.safetensors", pairs)
        (Path(directory) / "adapter_config.json").write_text(json.dumps(config))


def _worker_update_adapter(worker: Any, meta: Meta, aliases: Aliases, lora_id: int, config: dict,
                           directory: str) -> bool:
    """Run by `collective_rpc` on each vLLM worker: receive the adapter's tensors and put them in place of the
    registered adapter `lora_id` (the one the engine serves); False where this worker does not hold it (it
    then writes the adapter to `directory`, whence vLLM loads it when a request next needs it).

    Sound because it is vLLM's own reload of an adapter in place (what `LRUCacheWorkerLoRAManager.add_adapter`
    does for a `LoRARequest` with `load_inplace`), with the file read replaced by the received tensors:
    `LoRAModel.from_lora_tensors` is what `from_local_checkpoint` ends in (names parsed and mapped,
    lora_dtype), with the PEFTHelper (rank, alpha) and checks `_load_adapter` makes; then the manager's
    `remove_adapter`, `add_adapter` (which packs q/k/v and gate/up as the model fuses them and folds alpha / r
    into lora_b) and `activate_adapter` (`set_lora` of every module into the freed slot, the same one: a
    single slot). The tensor names the first adapter had were checked against the model's modules when it
    loaded, and this path is only taken for an adapter of the same config and tensors."""
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.utils.gpu_sync_debug import gpu_sync_allowed

    tensors: dict[str, Any] = {}
    seen: set[int] = set()
    for name, t in worker.rlvr_weight_group.receive(meta, aliases):
        # an alias gets its own copy: vLLM scales lora_b in place
        tensors[name] = t.clone() if t.data_ptr() in seen else t
        seen.add(t.data_ptr())
    owner = worker.model_runner.lora_manager
    manager = owner._adapter_manager
    if manager.get_adapter(lora_id) is None:
        with atomic_path(Path(directory) / "adapter_model.safetensors", durable=False) as tmp:
            write_safetensors(tmp, list(tensors.items()))
        return False
    peft_helper = PEFTHelper.from_dict({**config,
                                        "vllm_max_position_embeddings": owner.max_position_embeddings})
    peft_helper.validate_legal(owner.lora_config)
    model = manager.model
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    with gpu_sync_allowed():
        lora = LoRAModel.from_lora_tensors(
            lora_id, tensors, peft_helper, device="cpu", dtype=owner.lora_config.lora_dtype,
            model_vocab_size=owner.vocab_size, weights_mapper=mapper.get_rename_mapper() if mapper else None,
            skip_prefixes=getattr(model, "lora_skip_prefixes", None))
        manager._validate_moe_lora_format(lora)
        manager._validate_modules_to_save(lora)
        manager._validate_token_classification_lora(lora)
        manager.remove_adapter(lora_id)
        manager.add_adapter(lora)
        manager.activate_adapter(lora_id)
    return True


SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
                      "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def write_safetensors(path: Path, pairs: list[tuple[str, Any]]) -> None:
    """Write (name, tensor) pairs as a safetensors file straight from the tensors' memory. safetensors' own
    `save_file` refuses tensors that share a buffer (these are views of the received buckets) and copies each
    first; the format is an 8-byte header length, a JSON header of dtype, shape and byte range per tensor,
    then the bytes in that order."""
    import struct

    import torch

    header: dict[str, Any] = {}
    offset = 0
    for name, t in pairs:
        size = t.numel() * t.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[str(t.dtype).removeprefix("torch.")],
                        "shape": list(t.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, t in pairs:
            if t.numel():
                f.write(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data)


@contextmanager
def _quiet_reload(quiet: bool) -> Any:
    log = logging.getLogger(RELOAD_LOGGER)
    level = log.level
    if quiet:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


# ------------------------------------------------------------------------------------------- the engine
class NodeEngine(VLLMPolicy):
    """VLLMPolicy's in-process engine on an engine node; its weights change only by `receive` and
    `receive_adapter`."""

    def __init__(self, model: str | Path, *, engine_tp: int = 1, lora_rank: int = 0, **kw: Any) -> None:
        self.engine_tp, self.lora_rank = engine_tp, lora_rank
        options: dict[str, Any] = {}
        if engine_tp > 1:  # the engine's workers are its own processes, one GPU each, on this actor's GPUs
            options.update(tensor_parallel_size=engine_tp, distributed_executor_backend="mp")
        if lora_rank:  # one adapter at a time: the trainer's current one
            options.update(enable_lora=True, max_lora_rank=max_lora_rank(lora_rank), max_loras=1,
                           max_cpu_loras=1)
        kw["engine_options"] = options
        self._lora_serial, self._lora_form = 0, None
        super().__init__(model, **kw)
        self.auto_sync = False  # `.model` (a trainer copy) is never loaded on an engine node

    def join(self, host: str, port: int, first_rank: int, world_size: int, backend: str,
             prefix: str) -> list[int]:
        return self._llm.collective_rpc(_worker_join,
                                        args=(host, port, first_rank, world_size, backend, prefix))

    def receive(self, meta: Meta, version: int, aliases: Aliases | None = None,
                partial: bool = False) -> None:
        with self._lock, _quiet_reload(partial):
            self._llm.collective_rpc(_worker_receive, args=(meta, aliases or {}))
            self._llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
            # vLLM drops adapters when base weights change; the engine serves what it got
            self._drop_adapter()
            self.engine_version = version

    def receive_adapter(self, meta: Meta, version: int, config: dict, aliases: Aliases | None = None) -> None:
        if not self.lora_rank:
            raise UserError("this engine was started without LoRA support", field="policy.engine_lora_rank",
                            fix="set policy.engine_lora_rank to train.lora_rank")
        from vllm.lora.request import LoRARequest

        form = (json.dumps(config, sort_keys=True, default=str), [(n, d, list(s)) for n, d, s in meta],
                aliases or {})
        with self._lock:
            if self._lora_request is not None and form == self._lora_form:
                try:
                    self._update_adapter(meta, config, aliases or {})
                except BaseException:
                    # what the workers hold is unknown: the next sync loads a new adapter
                    self._lora_form = None
                    raise
                self._llm.reset_prefix_cache()
                self.engine_version = version
                return
            serial = self._lora_serial + 1
            directory = tempfile.mkdtemp(prefix=f"rlvr-lora-{serial}-", dir=scratch_dir())
            try:
                self._llm.collective_rpc(_worker_receive_adapter,
                                         args=(meta, aliases or {}, directory, config))
                request = LoRARequest(f"rlvr-lora-{serial}", serial, directory)
                self._llm.llm_engine.add_lora(request)  # loaded now, not by the first request that needs it
            except BaseException:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            self._drop_adapter()
            self._lora_request, self._lora_serial, self._lora_form = request, serial, form
            self._llm.reset_prefix_cache()
            self.engine_version = version

    def _update_adapter(self, meta: Meta, config: dict, aliases: Aliases) -> None:
        """The fast path of `receive_adapter`: the served adapter's tensors replaced in the workers. The file
        the adapter was loaded from is then stale: it is removed, so that vLLM could never load it again
        unnoticed; a worker that no longer held the adapter wrote the new one there instead, and it is loaded
        now."""
        from vllm.lora.request import LoRARequest

        request = self._lora_request
        held = self._llm.collective_rpc(_worker_update_adapter,
                                        args=(meta, aliases, request.lora_int_id, config, request.lora_path))
        if all(held):
            Path(request.lora_path, "adapter_model.safetensors").unlink(missing_ok=True)
        else:
            self._llm.llm_engine.add_lora(LoRARequest(request.lora_name, request.lora_int_id,
                                                      request.lora_path,
                                                      load_inplace=True))

    def _drop_adapter(self) -> None:
        old, self._lora_request = self._lora_request, None
        if old is not None:
            self._llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def close(self) -> None:
        if getattr(self, "_llm", None) is not None and getattr(self, "_lora_request", None) is not None:
            shutil.rmtree(self._lora_request.lora_path, ignore_errors=True)
        super().close()


class EngineActor:
    """One engine on a Ray node (a plain class: rlvr.scale.cluster.start makes it an actor; see
    rlvr.rollout.fleet.members for placement)."""

    def __init__(self) -> None:
        self.engine: NodeEngine | None = None

    def start(self, model: str, options: dict[str, Any]) -> dict[str, Any]:
        """Start the engine (the first token included); its node, device and version."""
        import ray

        self.engine = NodeEngine(model, **options)
        return {"node": ray.util.get_node_ip_address(), "node_id": ray.get_runtime_context().get_node_id(),
                "version": self.engine.engine_version, "gpus": ray.get_gpu_ids()}

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> tuple[int,
                                                                                           list[Completion]]:
        """Completions of token-id prompts, as VLLMPolicy gives them, and the version that sampled them."""
        assert self.engine is not None
        comps = self.engine.generate([[] for _ in prompt_token_ids], params,
                                     prompt_token_ids=prompt_token_ids)
        return self.engine.engine_version, comps

    def alive(self) -> int:
        """A sign of life (the version it generates with)."""
        return self.engine.engine_version if self.engine is not None else -1

    def init_weight_group(self, host: str, port: int, rank: int, world_size: int, backend: str,
                          prefix: str = "rlvr-weights") -> list[int]:
        """Join the trainer's weight-sync group: this engine's workers become ranks rank, rank + 1, ..."""
        assert self.engine is not None
        return self.engine.join(host, port, rank, world_size, backend, prefix)

    def receive_weights(self, meta: Meta, version: int, aliases: Aliases | None = None,
                        partial: bool = False) -> float:
        """Receive the weights the trainer broadcasts (`aliases`: the names that are an earlier tensor, not
        sent again; `partial`: only some blocks, the rest unchanged) and generate with them from now on;
        seconds."""
        assert self.engine is not None
        t0 = time.perf_counter()
        self.engine.receive(meta, version, aliases, partial)
        return time.perf_counter() - t0

    def receive_adapter(self, meta: Meta, version: int, config: dict,
                        aliases: Aliases | None = None) -> float:
        """Receive a LoRA adapter (tensors as peft names them, `config` its adapter_config.json) and generate
        with base + adapter from now on; seconds taken."""
        assert self.engine is not None
        t0 = time.perf_counter()
        self.engine.receive_adapter(meta, version, config, aliases)
        return time.perf_counter() - t0

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
