"""The cluster: connecting to Ray, placing actors on it, and the actors' lifecycle (start, loss, stop).

Every use of Ray in rlvr goes through here: the sandbox pool (rlvr.scale.ray_pool), the Ray launch of training
ranks (rlvr.train.distributed.launch) and the vLLM engine actors (rlvr.rollout.fleet.engines). What is
particular to each (what a pool actor holds, what a rank runs, how engines share a batch) stays with its
owner; how to reach the cluster, where an actor goes and how it is started and stopped is decided once, here.
Ray is imported when a function is called, so importing this module needs no Ray.

Logs. Ray forwards what its workers print to the driver (`log_to_driver`) and, left alone, writes a worker's
stdout to the driver's stdout, where it would mix with a command's results (`rlvr eval --json`, `rlvr query
--json`). `connect` forwards workers' output only when asked (`forward_logs`: the Ray launch of ranks, whose
progress is worth seeing), and then every line of it goes to the driver's stderr, as does every message Ray
itself prints in the driver (a node that died).
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rlvr.errors import UserError

UNREACHABLE_FIX = "start it with `ray start --head`, or give the right address"


# ------------------------------------------------------------------------------------------- connecting
def import_ray(needs: str = "running on a cluster", field: str = "cluster.address") -> Any:
    """The `ray` module, or a UserError naming what needed it and how to install it."""
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] != "ray":
            raise
        raise UserError(f"{needs} needs Ray", field=field, fix="pip install 'rlvr[ray]'") from None
    return ray


def connect(address: str | None, *, forward_logs: bool = False, needs: str = "running on a cluster") -> Any:
    """Connect this process to the Ray cluster at `address` (None: `auto`, the cluster this machine belongs to
    or `RAY_ADDRESS`) unless it already is (a process started by Ray, or one connected before); returns `ray`.

    `forward_logs`: print what the cluster's workers print, on this process's stderr (never its stdout). Off,
    the workers' output stays in the cluster's log files (`ray logs`). Either way, what Ray itself reports to
    the driver (a raylet that died, a node marked dead) goes to stderr."""
    ray = import_ray(needs)
    if ray.is_initialized():
        return ray
    target = address or "auto"
    redirected = _output_to_stderr()  # before init: Ray registers its printer then
    try:
        ray.init(address=target, ignore_reinit_error=True, log_to_driver=forward_logs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot connect to the Ray cluster at {target!r}: {first}", field="cluster.address",
                        fix=UNREACHABLE_FIX) from None
    if not redirected:
        sys.stderr.write("warning: this Ray's own messages may reach stdout; its workers' output is left in "
                         "`ray logs`\n")
        _stop_forwarding()
    return ray


def _output_to_stderr() -> bool:
    """Make Ray's printer of what reaches the driver (forwarded worker output, and Ray's own error messages
    such as "(raylet) Raylet is terminated") write every line to stderr; Ray sends a worker's stdout lines and
    its own messages to stdout otherwise. Ray has no public switch for this: its module-level printer is
    wrapped, and where Ray's internals differ from what is expected here, False (the caller then stops
    forwarding)."""
    try:
        from ray._private import worker as ray_worker

        original = ray_worker.print_to_stdstream
    except (ImportError, AttributeError):
        return False
    if getattr(original, "rlvr_to_stderr", False):
        return True

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> Any:
        return original({**data, "is_err": True}, ignore_prefix)

    to_stderr.rlvr_to_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr
    return True


def _stop_forwarding() -> None:
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

        dispatcher.remove_handler("ray_print_logs")
    except (ImportError, AttributeError):
        pass


# -------------------------------------------------------------------------------------------- placement
def resources() -> dict[str, float]:
    """What the connected cluster has in all (`CPU`, `GPU`, ...)."""
    import ray

    return dict(ray.cluster_resources())


def require(resource: str, need: float, *, what: str, field: str, fix: str) -> None:
    """Refuse, in one line, `what` (e.g. "4 engines") when the cluster has fewer than `need` of `resource`."""
    have = resources().get(resource, 0)
    if have < need:
        raise UserError(f"{what} need {_count(need)} {resource}s; the Ray cluster has {_count(have)}",
                        field=field,
                        fix=fix)


def _count(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def alive_nodes(min_cpus: float = 0.0) -> list[str]:
    """The ids of the alive nodes that can run work (some CPUs, at least `min_cpus` of them in all),
    sorted."""
    import ray

    def fits(cpus: float) -> bool:
        return cpus > 0 and cpus >= min_cpus

    return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive")
                  and fits(n.get("Resources", {}).get("CPU", 0)))


_WANTS: dict[str, list[dict[str, float]]] = {}
_WANTS_LOCK = threading.Lock()


def want(owner: str, shapes: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """Tell the cluster's autoscaler (Ray's own, or KubeRay's) what `owner` ("sandbox", "engines") wants in
    all, one resource bundle each (`{"CPU": 1}` per sandbox worker, `{"GPU": 1}` per engine, ...); returns
    what is now asked for. The autoscaler provisions nodes until every bundle of every owner fits and keeps
    them while the request stands. Ray keeps one request per cluster and each call of `request_resources`
    replaces the last, so the owners' wants are merged here and sent together; `[]` withdraws an owner's. A
    cluster without an autoscaler records the request and does nothing."""
    from ray.autoscaler.sdk import request_resources

    with _WANTS_LOCK:
        if shapes:
            _WANTS[owner] = [dict(s) for s in shapes]
        else:
            _WANTS.pop(owner, None)
        merged = [shape for name in sorted(_WANTS) for shape in _WANTS[name]]
        request_resources(bundles=merged)
    return merged


def short(node_id: str) -> str:
    """The name a node goes by in records and reports: the first 12 hex digits of its Ray id."""
    return node_id[:12]


# ------------------------------------------------------------------------------------------------ draining
DRAINED_NAMESPACE = "rlvr"
"""Ray's internal key-value namespace of the drained marks (`drained/<node id>`)."""


def _gcs(address: str | None = None) -> Any:
    """A GCS client: of the connected cluster, or of the one at `address` (no driver connection needed)."""
    import ray
    from ray._raylet import GcsClient

    return GcsClient(address=address or ray.get_runtime_context().gcs_address)


def drain(node_id: str, grace_s: float, *, reason: str = "preemption notice",
          address: str | None = None) -> bool:
    """Ask Ray to drain a node that will be gone in `grace_s` seconds (a preemption notice): from now on
    nothing new is placed on it, what runs there goes on, and every rlvr fleet hands its work elsewhere before
    the deadline (rlvr.scale.elastic). Ray's own drain, the one its autoscaler uses for preemption, so Ray
    Serve and others see it too. True when Ray accepted the request."""
    import time

    from ray.core.generated import autoscaler_pb2

    deadline_ms = int((time.time() + grace_s) * 1000)
    accepted, _ = _gcs(address).drain_node(node_id, autoscaler_pb2.DrainNodeReason.Value(
        "DRAIN_NODE_REASON_PREEMPTION"), reason, deadline_ms)
    return bool(accepted)


def draining_nodes() -> dict[str, float]:
    """Node id -> the Unix time by which each draining node will be gone (inf: no deadline given)."""
    out = _gcs().get_draining_nodes()
    return {node: (ms / 1000 if ms else float("inf")) for node, ms in out.items()}


def mark_drained(node_id: str) -> None:
    """Record that this process's fleet has nothing left on a draining node (the node's agent may stop it)."""
    from ray.experimental.internal_kv import _internal_kv_put

    _internal_kv_put(f"drained/{node_id}", b"1", overwrite=True, namespace=DRAINED_NAMESPACE)


def is_idle(node_id: str, address: str | None = None) -> bool:
    """Whether Ray reports the node idle: no resource in use there (no actor or task holding CPUs, GPUs, ...).
    A draining node that is idle has nothing left to lose."""
    for node, info in _gcs(address).get_all_node_info().items():
        if node.hex() == node_id:
            snap = info.state_snapshot
            return bool(type(snap).State.Name(snap.state) == "IDLE")
    return False


def is_drained(node_id: str, address: str | None = None) -> bool:
    """Whether a fleet marked the node drained (read by the node's agent, which needs no driver
    connection)."""
    value = _gcs(address).internal_kv_get(f"drained/{node_id}".encode(), DRAINED_NAMESPACE.encode())
    return bool(value)


def on_node(node_id: str) -> Any:
    """The scheduling strategy that pins an actor to one node (hard affinity: never elsewhere)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


@contextmanager
def bundles(shapes: Sequence[dict[str, float]], strategy: str = "PACK") -> Iterator[Any]:
    """A placement group of `shapes` (one resource bundle each), ready before it is yielded and removed
    after."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group(list(shapes), strategy=strategy)
    try:
        ray.get(group.ready())
        yield group
    finally:
        remove_placement_group(group)


def in_bundle(group: Any, index: int) -> Any:
    """The scheduling strategy that puts an actor in bundle `index` of a placement group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)


# -------------------------------------------------------------------------------------------- lifecycle
def start(cls: type, *args: Any, strategy: Any = None, **options: Any) -> Any:
    """One actor of the plain class `cls`, constructed with `args`, with the Ray `options` given (num_cpus,
    num_gpus, max_concurrency, ...). Ray never restarts it (`max_restarts = 0`): its owner notices the loss
    and decides (replace it, retry elsewhere, restart the job)."""
    import ray

    if strategy is not None:
        options["scheduling_strategy"] = strategy
    return ray.remote(max_restarts=0, **options)(cls).remote(*args)


def actor_faults() -> tuple[type[BaseException], ...]:
    """The exceptions that mean an actor is gone (died, killed, or its node lost), not that its method
    failed."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return (RayActorError, ActorDiedError, ActorUnavailableError)


def cause(exc: BaseException) -> BaseException:
    """The exception an actor's method raised, out of Ray's wrapping of it."""
    inner = getattr(exc, "cause", None)
    return inner if isinstance(inner, BaseException) else exc


def wait_started(refs: Sequence[Any], *, timeout_s: float, what: str, field: str, fix: str) -> list[Any]:
    """The results of actor calls that start something (`what`: "the engines did not start"): past `timeout_s`
    a one-line UserError; a UserError raised inside an actor is raised here as itself. Other failures
    propagate."""
    import ray

    try:
        return ray.get(list(refs), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise UserError(f"{what} within {timeout_s:.0f} s", field=field, fix=fix) from None
    except ray.exceptions.RayError as exc:
        inner = cause(exc)
        if isinstance(inner, UserError):
            raise UserError(inner.what, file=inner.file, field=inner.field, fix=inner.fix) from None
        raise


def kill(actor: Any) -> None:
    """Kill one actor for good; one already gone is fine."""
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 (already gone, or Ray shutting down: nothing left to stop)
        pass


def stop(actors: Sequence[Any], method: str | None = "close", timeout_s: float = 60.0) -> None:
    """Stop actors: ask each to `method` (release what it holds) and wait up to `timeout_s` for all of them,
    then kill each (an actor that died or hung is killed all the same). `method` None: kill at once."""
    if not actors:
        return
    import ray

    if method is not None:
        refs = []
        for actor in actors:
            try:
                refs.append(getattr(actor, method).remote())
            except Exception:  # noqa: BLE001 (an actor already gone: killing it below is all that is left)
                pass
        if refs:  # every one has its chance: a dead actor's error does not cut the others' wait short
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    for actor in actors:
        kill(actor)
    _wait_dead(actors)


def _wait_dead(actors: Sequence[Any], timeout_s: float = 10.0) -> None:
    """Wait until Ray reports every killed actor dead: `ray.kill` only sends the request, and a call made
    right after it could still be served by the actor."""
    import time

    try:
        from ray._private import state
    except ImportError:  # another Ray: the kill stands, only its timing is unknown
        return
    deadline = time.monotonic() + timeout_s
    for actor in actors:
        while time.monotonic() < deadline:
            try:
                info = state.actors(actor_id=actor._actor_id.hex())
            except Exception:  # noqa: BLE001 (Ray shutting down, or an actor it no longer knows: gone)
                break
            if not info or info.get("State") == "DEAD":
                break
            time.sleep(0.02)
