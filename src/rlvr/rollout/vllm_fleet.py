"""Disaggregated generation (`[policy] engines = K`): the trainer's side of K vLLM engines as Ray actors, fed the
trainer's weights after each update over a torch.distributed group of their own.

What runs where. The trainer's process holds an `EnginesPolicy`: the tokenizer, the transformers model it
updates (`.model`) and the policy versions, exactly as `VLLMPolicy` does (it is one), but no engine. Each engine
is an `EngineActor` (rlvr.rollout.vllm_actor) on some Ray node, placed and started through rlvr.scale.cluster
with one GPU per engine (`engine_tp` with tensor parallelism) on a cluster with GPUs, else one CPU. A generate
call renders the prompts in the trainer, sends each engine its share as token ids (a conversation's group, the
samples of one task, stays on one engine while the weights do not change, so their shared prompt is prefilled
once) and waits for all of them.

Weight sync. `sync_weights()` opens the weight-sync group at the first sync (rlvr.rollout.weight_sync: the
trainer is rank 0 and hosts the store, every engine worker joins), sends the tensor names, dtypes and shapes
through Ray (a control message), then broadcasts the bytes of `trainer_weights(.model)` (LoRA merged; a tied
weight once) while each engine receives and loads them.

Versions and staleness are VLLMPolicy's: `version` is the trainer's, `engine_version` the one every engine
holds (all engines sync together, under the lock that also guards generate), `generate()` syncs first when they
differ unless `separate_weights()` turned that off (asynchronous mode), and every completion records the
version its engine reported, which must be `engine_version`.
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlvr.envs.messages import Message
from rlvr.errors import InfraError, UserError
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.rollout.tokens import AUTO
from rlvr.rollout.vllm import VLLMPolicy
from rlvr.rollout.vllm_actor import EngineActor
from rlvr.rollout.weight_sync import GROUP_TIMEOUT_S, WeightGroup, tensor_aliases, tensor_meta
from rlvr.scale import cluster

START_TIMEOUT_S = 900.0
"""Limit of the engines' start-up (a CPU engine takes about a minute on a loaded 2-core machine)."""
STICKY_LIMIT = 100_000
"""Group keys remembered per weight version (the map is cleared at each sync and when it grows past this)."""


# ------------------------------------------------------------------------------------ sharing a batch
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
        self._ray = cluster.import_ray("policy.engines", field="policy.engines")
        cluster.connect(address, needs="policy.engines")
        self._gpus = self._placement(device)
        self._actors: list[Any] = []
        self._group: WeightGroup | None = None
        self._sticky: dict[str, int] = {}
        super().__init__(model_path_or_name, dtype=dtype, max_context=max_context, device=device,
                         kv_cache_mb=kv_cache_mb, seed=seed, trust_remote_code=trust_remote_code,
                         chat_template=chat_template)

    def _placement(self, device: str) -> int:
        """GPUs per engine (0: CPU engines), refusing what the cluster cannot place."""
        gpu = device != "cpu" and cluster.resources().get("GPU", 0) > 0
        if device.startswith("cuda") and not gpu:
            raise UserError(f"policy.device = {device!r} but the Ray cluster has no GPUs", field="policy.device",
                            fix='use device = "auto" or "cpu", or add GPU nodes')
        if self.engine_tp > 1 and not gpu:
            raise UserError(f"engine_tp = {self.engine_tp} needs CUDA GPUs, which this cluster does not have",
                            field="policy.engine_tp", fix="use engine_tp = 1 on CPU")
        cluster.require("GPU" if gpu else "CPU", self.engines * self.engine_tp if gpu else self.engines,
                        what=f"{self.engines} engines", field="policy.engines", fix="lower policy.engines or add nodes")
        return self.engine_tp if gpu else 0

    def _start_engine(self, path: Path, dtype: str, device: str, kv_cache_mb: int | None, seed: int) -> Any:
        """Start the engine actors (called by VLLMPolicy.__init__ in place of its in-process engine)."""
        options = {"dtype": dtype, "max_context": self.max_context, "device": "cpu" if not self._gpus else device,
                   "kv_cache_mb": kv_cache_mb, "seed": seed, "trust_remote_code": self.trust_remote_code,
                   "chat_template": self.chat_template, "engine_tp": self.engine_tp}
        self._actors = [cluster.start(EngineActor, num_cpus=0 if self._gpus else 1, num_gpus=self._gpus)
                        for _ in range(self.engines)]
        try:
            self.info = cluster.wait_started([a.start.remote(str(path), options) for a in self._actors],
                                             timeout_s=START_TIMEOUT_S, what="the engines did not start",
                                             field="policy.engines",
                                             fix="check that the Ray cluster can place them (`ray status`)")
        except BaseException:
            self.close()
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
            raise InfraError(f"an engine could not join the weight-sync group: {cluster.cause(exc)}") from None
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
                raise InfraError(f"weight sync to the engines failed: {cluster.cause(exc)}") from None
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
        cluster.stop(actors, "close", timeout_s=60)  # an engine already gone is killed all the same
