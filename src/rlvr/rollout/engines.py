"""Disaggregated generation (`[policy] engines = K`): K vLLM engines as Ray actors, fed the trainer's weights after
each update over a torch.distributed group of their own.

What runs where. The trainer's process holds an `EnginesPolicy`: the tokenizer, the transformers model it
updates (`.model`) and the policy versions, exactly as `VLLMPolicy` does (it is one), but no engine. Each engine
is an `EngineActor` on some Ray node, holding a `NodeEngine`: VLLMPolicy's own in-process engine (same options,
same sampling, the same `Completion` records with token ids and behaviour log-probs), started on that node's GPU
(`num_gpus = 1`) or, on CPU, with one CPU (`num_cpus = 1`). A generate call renders the prompts in the trainer,
sends each engine its share as token ids (a conversation's group, the samples of one task, stays on one engine
while the weights do not change, so their shared prompt is prefilled once) and waits for all of them.

Weight sync. The trainer (rank 0) and every engine worker (ranks 1..) form a process group on a TCPStore that
the trainer hosts: gloo on CPU, NCCL where both sides hold their weights on CUDA. It is built from
`ProcessGroupGloo`/`ProcessGroupNCCL` directly, so the default process group is never touched: the engine's
own vLLM uses that one, and a trainer may be a torchrun rank with its own. `sync_weights()` sends the tensor
names, dtypes and shapes through Ray (a control message), then broadcasts the bytes of `trainer_weights(.model)`
(LoRA merged; a tied weight once) in buckets of up to `BUCKET_BYTES`; each engine worker receives them into fresh
buffers and loads them with vLLM's in-place `reload_weights` as they arrive, the next bucket in flight meanwhile (a function sent by `collective_rpc`, so that with
tensor parallelism every worker of an engine receives for itself), resets the prefix cache and records the
version. The group is opened at the first sync.

Versions and staleness are VLLMPolicy's: `version` is the trainer's, `engine_version` the one every engine
holds (all engines sync together, under the lock that also guards generate), `generate()` syncs first when they
differ unless `separate_weights()` turned that off (asynchronous mode), and every completion records the
version its engine reported, which must be `engine_version`.
"""
from __future__ import annotations

import datetime
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlvr.envs.messages import Message
from rlvr.errors import InfraError, UserError
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.rollout.tokens import AUTO
from rlvr.rollout.vllm import VLLMPolicy

BUCKET_BYTES = 128 << 20
"""Largest broadcast of one sync (tensors are packed as bytes; a larger tensor goes alone)."""
ALIGN = 64
"""Byte alignment of each tensor inside a bucket (a byte view is re-viewed as its dtype in place)."""
GROUP_TIMEOUT_S = 600.0
"""Limit of the group's rendezvous and of each broadcast: a lost engine fails a sync, never hangs it."""
START_TIMEOUT_S = 900.0
"""Limit of the engines' start-up (a CPU engine takes about a minute on a loaded 2-core machine)."""
STICKY_LIMIT = 100_000
"""Group keys remembered per weight version (the map is cleared at each sync and when it grows past this)."""

Meta = list[tuple[str, str, tuple[int, ...]]]
"""(name, dtype, shape) of each tensor of a sync, in the order they are broadcast."""
Aliases = dict[int, int]
"""Index in a sync's meta -> the earlier index it is the very same tensor as (tied weights: sent once)."""


# ------------------------------------------------------------------------------------------- weight group
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
    """The broadcast plan of a sync, computed alike by sender and receivers from the meta (aliases are not sent)."""
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


class WeightGroup:
    """A process group between the trainer (rank 0, which hosts the store) and the engine workers, made without
    the default process group; it carries weights one way, by broadcast from rank 0."""

    def __init__(self, pg: Any, store: Any, rank: int, world_size: int, device: str,
                 bucket_bytes: int = BUCKET_BYTES) -> None:
        self.pg, self.store, self.rank, self.world_size, self.device = pg, store, rank, world_size, device
        self.bucket_bytes = bucket_bytes
        """Every rank of a group must use the same value (the buckets are planned from the meta alone)."""

    @classmethod
    def open(cls, host: str, port: int, rank: int, world_size: int, backend: str, device: str = "cpu",
             store: Any = None, timeout_s: float = GROUP_TIMEOUT_S) -> WeightGroup:
        """Join the group (blocks until every rank has joined); rank 0 passes the store it hosts."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(host, port, world_size, False, timeout=timeout)
        prefixed = dist.PrefixStore("rlvr-weights", store)
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
        """Ranks 1..: the (name, tensor) pairs as their bucket arrives, the next bucket arriving while the caller
        loads this one. Each bucket is a fresh buffer, since a loader may keep what it was given until a layer
        is complete. An alias comes right after the tensor it is."""
        import torch

        plan = buckets(meta, self.bucket_bytes, aliases)
        named = {src: [j for j, k in (aliases or {}).items() if k == src] for src in set((aliases or {}).values())}

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
    """One engine on a Ray node (wrapped by `ray.remote` when started; see EnginesPolicy for placement)."""

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


# ------------------------------------------------------------------------------------------ trainer side
def group_key(conversation: Sequence[Message], index: int) -> str:
    """What the samples of one group share: the conversation up to its first user message (the task prompt)."""
    head: list[str] = []
    for m in conversation:
        head.append(f"{m.role}\x00{m.content}")
        if m.role == "user":
            return hashlib.sha1("\x01".join(head).encode()).hexdigest()
    return f"#{index}"  # no user message: nothing to share


def assign(keys: Sequence[str], engines: int, sticky: dict[str, int]) -> list[int]:
    """The engine of each conversation: a key seen before keeps its engine, a new key goes to the engine with the
    fewest conversations in this call (new keys are remembered in `sticky`)."""
    counts = Counter(keys)
    load = [0] * engines
    for key, count in counts.items():
        if key in sticky:
            load[sticky[key]] += count
    for key, count in counts.items():  # in order of first appearance
        if key not in sticky:
            sticky[key] = min(range(engines), key=lambda e: (load[e], e))
            load[sticky[key]] += count
    return [sticky[key] for key in keys]


def shares(where: Sequence[int], params: SamplingParams) -> list[tuple[int, list[int], SamplingParams]]:
    """(engine, indices, sampling) of each engine's part of a call: each part keeps its conversations' own seeds
    and budgets, so a stream does not depend on how a batch was split (`params.seeds` must be set)."""
    assert params.seeds is not None
    out = []
    for e in sorted(set(where)):
        idx = [i for i, w in enumerate(where) if w == e]
        out.append((e, idx, replace(params, seeds=tuple(params.seeds[i] for i in idx),
                                    budgets=None if params.budgets is None else tuple(params.budgets[i] for i in idx))))
    return out


def _import_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise UserError("policy.engines needs Ray", field="policy.engines", fix="pip install 'rlvr[ray]'") from None
    return ray


def _cause(exc: BaseException) -> BaseException:
    return getattr(exc, "cause", None) or exc


def connect(address: str | None) -> None:
    """Connect this process to the Ray cluster at `address` (None: `auto`), unless it already is."""
    ray = _import_ray()
    if ray.is_initialized():
        return
    try:
        ray.init(address=address or "auto", ignore_reinit_error=True, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UserError(f"cannot connect to the Ray cluster at {address or 'auto'!r}: {exc}",
                        field="cluster.address", fix="start it with `ray start --head`") from None


class EnginesPolicy(VLLMPolicy):
    """The trainer's side of disaggregated generation (see the module docstring)."""

    def __init__(self, model_path_or_name: str | Path, *, engines: int = 1, engine_tp: int = 1,
                 address: str | None = None, dtype: str = "float32", max_context: int | None = None,
                 device: str = "auto", kv_cache_mb: int | None = 512, seed: int = 0, trust_remote_code: bool = False,
                 chat_template: str = AUTO) -> None:
        if engines < 1 or engine_tp < 1:
            raise UserError(f"engines = {engines}, engine_tp = {engine_tp}", field="policy.engines",
                            fix="both must be at least 1")
        self.engines, self.engine_tp, self.chat_template = engines, engine_tp, chat_template
        self.sync_bytes: list[int] = []
        """Payload bytes broadcast by each weight sync, in order (with `sync_seconds`)."""
        self.engine_sync_seconds: list[float] = []
        """The slowest engine's receive-and-load seconds of each sync."""
        self.info: list[dict[str, Any]] = []
        """What each engine reported at start: node, GPU ids, version."""
        self._ray = _import_ray()
        connect(address)
        self._gpus = self._placement(device)
        self._actors: list[Any] = []
        self._group: WeightGroup | None = None
        self._sticky: dict[str, int] = {}
        super().__init__(model_path_or_name, dtype=dtype, max_context=max_context, device=device,
                         kv_cache_mb=kv_cache_mb, seed=seed, trust_remote_code=trust_remote_code,
                         chat_template=chat_template)


    def _placement(self, device: str) -> int:
        """GPUs per engine (0: CPU engines), refusing what the cluster cannot place."""
        res = self._ray.cluster_resources()
        gpu = device != "cpu" and res.get("GPU", 0) > 0
        if device.startswith("cuda") and not gpu:
            raise UserError(f"policy.device = {device!r} but the Ray cluster has no GPUs", field="policy.device",
                            fix='use device = "auto" or "cpu", or add GPU nodes')
        if self.engine_tp > 1 and not gpu:
            raise UserError(f"engine_tp = {self.engine_tp} needs CUDA GPUs, which this cluster does not have",
                            field="policy.engine_tp", fix="use engine_tp = 1 on CPU")
        need = self.engines * self.engine_tp if gpu else self.engines
        have = res.get("GPU" if gpu else "CPU", 0)
        if have < need:
            kind = "GPUs" if gpu else "CPUs"
            raise UserError(f"{self.engines} engines need {need} {kind}; the Ray cluster has {have:g}",
                            field="policy.engines", fix="lower policy.engines or add nodes")
        return self.engine_tp if gpu else 0

    def _start_engine(self, path: Path, dtype: str, device: str, kv_cache_mb: int | None, seed: int) -> Any:
        """Start the engine actors (called by VLLMPolicy.__init__ in place of its in-process engine)."""
        ray = self._ray
        actor = ray.remote(num_cpus=0 if self._gpus else 1, num_gpus=self._gpus, max_restarts=0)(EngineActor)
        options = {"dtype": dtype, "max_context": self.max_context, "device": "cpu" if not self._gpus else device,
                   "kv_cache_mb": kv_cache_mb, "seed": seed, "trust_remote_code": self.trust_remote_code,
                   "chat_template": self.chat_template, "engine_tp": self.engine_tp}
        self._actors = [actor.remote() for _ in range(self.engines)]
        try:
            self.info = ray.get([a.start.remote(str(path), options) for a in self._actors], timeout=START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise UserError(f"the engines did not start within {START_TIMEOUT_S:.0f} s", field="policy.engines",
                            fix="check that the Ray cluster can place them (`ray status`)") from None
        except ray.exceptions.RayError as exc:
            self.close()
            cause = _cause(exc)
            if isinstance(cause, UserError):
                raise UserError(cause.what, file=cause.file, field=cause.field, fix=cause.fix) from None
            raise
        return None  # no engine in this process

    # ------------------------------------------------------------------------------------------ weights
    def _open_group(self, pairs: Sequence[tuple[str, Any]]) -> WeightGroup:
        """The weight-sync group: NCCL when the weights are on CUDA and the engines on GPUs, else gloo."""
        ray = self._ray
        on_cuda = bool(pairs) and pairs[0][1].device.type == "cuda"
        backend = "nccl" if on_cuda and self._gpus else "gloo"
        world = 1 + self.engines * self.engine_tp
        host = ray.util.get_node_ip_address()
        store = WeightGroup.host_store(host, world)
        refs = [a.init_weight_group.remote(host, store.port, 1 + i * self.engine_tp, world, backend)
                for i, a in enumerate(self._actors)]
        joined: Future[WeightGroup] = Future()

        def join() -> None:  # rank 0 joins beside the engines, so that an engine's failure is seen at once
            try:
                joined.set_result(WeightGroup.open(host, store.port, 0, world, backend,
                                                   "cuda" if backend == "nccl" else "cpu", store=store))
            except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
                joined.set_exception(exc)

        threading.Thread(target=join, name="rlvr-weight-group", daemon=True).start()
        try:
            ray.get(refs, timeout=GROUP_TIMEOUT_S)
        except ray.exceptions.RayError as exc:
            raise InfraError(f"an engine could not join the weight-sync group: {_cause(exc)}") from None
        return joined.result(timeout=GROUP_TIMEOUT_S)

    def sync_weights(self, weights: Any = None, version: int | None = None) -> float:
        """Broadcast new weights to every engine and return the seconds it took (bytes sent go to `sync_bytes`;
        tied weights are sent once).

        `weights` and `version` as for VLLMPolicy.sync_weights. A failed sync (an engine lost) is an InfraError:
        the engines' weights are then unknown, so the run stops rather than sample with them.
        """
        ray = self._ray
        t0 = time.perf_counter()
        pairs = self._weight_pairs(weights)
        version = self.version if version is None else version
        with self._lock:
            if self._group is None:
                self._group = self._open_group(pairs)
            meta, aliases = tensor_meta(pairs), tensor_aliases(pairs)
            refs = [a.receive_weights.remote(meta, version, aliases) for a in self._actors]
            try:
                sent = self._group.send(pairs, aliases)
                engine_s = max(ray.get(refs, timeout=GROUP_TIMEOUT_S))
            except (ray.exceptions.RayError, RuntimeError) as exc:
                raise InfraError(f"weight sync to the engines failed: {_cause(exc)}") from None
            self.engine_version = version
            self._sticky.clear()  # prefix caches were reset: a group may move to another engine
        dt = time.perf_counter() - t0
        self.sync_seconds.append(dt)
        self.sync_bytes.append(sent)
        self.engine_sync_seconds.append(engine_s)
        return dt

    # ---------------------------------------------------------------------------------------- generation
    def _generate(self, conversations: Sequence[list[Message]], params: SamplingParams,
                  prompt_token_ids: Sequence[list[int] | None] | None) -> list[Completion]:
        """Each engine generates its share at once; results in the callers' order, stamped by their engines."""
        n = len(conversations)
        if not n:
            return []
        ray = self._ray
        given = list(prompt_token_ids) if prompt_token_ids is not None else [None] * n
        prompts = [list(g) if g is not None else self.encode(self.render(c)) for c, g in zip(conversations, given)]
        seeds = tuple(params.seeds) if params.seeds is not None else tuple(range(n))  # not renumbered per engine
        if len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} conversations")
        if len(self._sticky) > STICKY_LIMIT:
            self._sticky.clear()
        where = assign([group_key(c, i) for i, c in enumerate(conversations)], self.engines, self._sticky)
        calls = [(idx, self._actors[e].generate.remote([prompts[i] for i in idx], sub))
                 for e, idx, sub in shares(where, replace(params, seeds=seeds))]
        results: list[Completion] = [Completion(text="", finish_reason="error", error="no engine answered")] * n
        for idx, ref in calls:
            version, comps = ray.get(ref)
            if version != self.engine_version:
                raise InfraError(f"an engine holds version {version}, not {self.engine_version}")
            for i, comp in zip(idx, comps):
                results[i] = comp
        return results

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop the engines and the weight-sync group (idempotent)."""
        group, self._group = getattr(self, "_group", None), None
        if group is not None:
            group.close()
        actors, self._actors = getattr(self, "_actors", []), []
        if actors:
            ray = self._ray
            try:
                ray.get([a.close.remote() for a in actors], timeout=60)
            except ray.exceptions.RayError:
                pass  # an engine already gone: killing it below is all that is left
            for a in actors:
                ray.kill(a)
