"""The cluster: connecting to Ray, placing actors on it, and the actors' lifecycle (start, loss, stop).

Every use of Ray in rlvr goes through here: the sandbox pool (rlvr.scale.ray_pool), the Ray launch of training
ranks (rlvr.train.distributed.launch) and the vLLM engine actors (rlvr.rollout.vllm_fleet). What is particular to
each (what a pool actor holds, what a rank runs, how engines share a batch) stays with its owner; how to reach the
cluster, where an actor goes and how it is started and stopped is decided once, here. Ray is imported when a
function is called, so importing this module needs no Ray.

Logs. Ray forwards what its workers print to the driver (`log_to_driver`) and, left alone, writes a worker's
stdout to the driver's stdout, where it would mix with a command's results (`rlvr eval --json`, `rlvr query
--json`). `connect` forwards workers' output only when asked (`forward_logs`: the Ray launch of ranks, whose
progress is worth seeing), and then every line of it goes to the driver's stderr.
"""
from __future__ import annotations

import sys
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
    """Connect this process to the Ray cluster at `address` (None: `auto`, the cluster this machine belongs to or
    `RAY_ADDRESS`) unless it already is (a process started by Ray, or one connected before); returns `ray`.

    `forward_logs`: print what the cluster's workers print, on this process's stderr (never its stdout). Off, the
    workers' output stays in the cluster's log files (`ray logs`)."""
    ray = import_ray(needs)
    if ray.is_initialized():
        return ray
    target = address or "auto"
    try:
        ray.init(address=target, ignore_reinit_error=True, log_to_driver=forward_logs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot connect to the Ray cluster at {target!r}: {first}", field="cluster.address",
                        fix=UNREACHABLE_FIX) from None
    if forward_logs and not _logs_to_stderr():
        sys.stderr.write("warning: this Ray cannot send its workers' output to stderr; it is left in `ray logs`\n")
    return ray


def _logs_to_stderr() -> bool:
    """Replace Ray's printer of forwarded worker output (stdout lines to stdout, stderr lines to stderr) by one that
    prints every line on stderr. Ray has no public switch for this; where its internals differ from what is
    expected here, forwarding is turned off instead (False), so stdout stays clean either way."""
    try:
        from ray._private import worker as ray_worker
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

        print_logs = ray_worker.print_worker_logs
        dedup = ray_worker.stderr_deduplicator.deduplicate  # one deduplicator: both streams now share a sink
        ignore_prefix = ray_worker._should_ignore_worker_log_prefix(ray_worker.global_worker)
        if not any(name == "ray_print_logs" for name, _ in dispatcher.handlers):
            return False
    except (ImportError, AttributeError):  # another Ray: stop forwarding altogether
        _stop_forwarding()
        return False

    def to_stderr(batch: dict[str, Any]) -> None:
        for part in dedup(batch) if batch.get("pid") != "autoscaler" else [batch]:
            print_logs(part, sys.stderr, ignore_prefix)

    dispatcher.remove_handler("ray_print_logs")
    dispatcher.add_handler("ray_print_logs", to_stderr)
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
        raise UserError(f"{what} need {_count(need)} {resource}s; the Ray cluster has {_count(have)}", field=field,
                        fix=fix)


def _count(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def alive_nodes() -> list[str]:
    """The ids of the alive nodes that can run work (at least one CPU), sorted."""
    import ray

    return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0)


def on_node(node_id: str) -> Any:
    """The scheduling strategy that pins an actor to one node (hard affinity: never elsewhere)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


@contextmanager
def bundles(shapes: Sequence[dict[str, float]], strategy: str = "PACK") -> Iterator[Any]:
    """A placement group of `shapes` (one resource bundle each), ready before it is yielded and removed after."""
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
    num_gpus, max_concurrency, ...). Ray never restarts it (`max_restarts = 0`): its owner notices the loss and
    decides (replace it, retry elsewhere, restart the job)."""
    import ray

    if strategy is not None:
        options["scheduling_strategy"] = strategy
    return ray.remote(max_restarts=0, **options)(cls).remote(*args)


def actor_faults() -> tuple[type[BaseException], ...]:
    """The exceptions that mean an actor is gone (died, killed, or its node lost), not that its method failed."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return (RayActorError, ActorDiedError, ActorUnavailableError)


def cause(exc: BaseException) -> BaseException:
    """The exception an actor's method raised, out of Ray's wrapping of it."""
    inner = getattr(exc, "cause", None)
    return inner if isinstance(inner, BaseException) else exc


def wait_started(refs: Sequence[Any], *, timeout_s: float, what: str, field: str, fix: str) -> list[Any]:
    """The results of actor calls that start something (`what`: "the engines did not start"): past `timeout_s`
    a one-line UserError; a UserError raised inside an actor is raised here as itself. Other failures propagate."""
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
    """Stop actors: ask each to `method` (release what it holds) and wait up to `timeout_s` for all of them, then
    kill each (an actor that died or hung is killed all the same). `method` None: kill at once."""
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
