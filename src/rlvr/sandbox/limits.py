"""The one place where the limits of a sandboxed command are decided: layers of partial limits merged per
field.

The layers, in order (each one per field, over the ones before it):

1. **sandbox defaults**: the `[sandbox]` section of the run config (`timeout_s`, `memory_mb`, `processes`,
   `output_bytes`; the other fields keep ExecLimits' own defaults), built by `rlvr.sandbox.limits_from` and
   held by the pool as `pool.limits`;
2. **task limits**: what the task itself asks for, `task_layer(task)`: the `TaskLimits` fields the task sets
   (not None: `exec_timeout_s` as `timeout_s`, and `memory_mb`; None survives a JSON round trip, so a task
   sent to another node or restored from a checkpoint asks for the same) and what its verifier derives from
   the task's settings (a `[verifier] timeout_s`, the grace a trusted harness needs). A task may raise or
   lower any default;
3. **scheduler budget**: may only lower what 1 and 2 allow;
4. **request**: a tool call's (or one verifier step's) own ask; may only lower what 1 to 3 allow.

A layer sets only some fields: an `ExecLimits` counts the fields given when it was built (its
`model_fields_set`: `ExecLimits(timeout_s=5)` sets the timeout alone), a mapping counts its non-None values. A
field no layer sets keeps the sandbox default. `cpu_s = None` (bounded by the wall timeout) counts as no CPU
cap of its own, so a later layer's `cpu_s` applies.

Pools merge what a caller passes to `run(limits=...)` the same way (`merged`): the fields the caller set
replace the pool's defaults, the others keep them, so partial limits never wipe the `[sandbox]` defaults. A
resolved ExecLimits (what `resolve` returns) sets every field and runs as it is.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from rlvr.sandbox.result import ExecLimits


class TaskExecFields(Protocol):
    """What the sandbox reads of a task's limits (`rlvr.tasks.spec.TaskLimits` has these fields; the sandbox,
    the bottom layer, knows no task record)."""

    @property
    def exec_timeout_s(self) -> float | None: ...
    @property
    def memory_mb(self) -> int | None: ...


class HasLimits(Protocol):
    """Anything with `limits` of that shape (a task: the sandbox knows no task record)."""

    @property
    def limits(self) -> TaskExecFields: ...

Layer = ExecLimits | Mapping[str, Any] | None
"""Partial limits: an ExecLimits (its set fields), a mapping (its non-None values), or None (nothing)."""

TASK_FIELDS = {"exec_timeout_s": "timeout_s", "memory_mb": "memory_mb"}
"""TaskLimits field -> the ExecLimits field it sets."""


def fields_of(layer: Layer) -> dict[str, Any]:
    """The fields a layer sets, validated as ExecLimits fields (a bad value raises pydantic's
    ValidationError)."""
    if layer is None:
        return {}
    if not isinstance(layer, ExecLimits):
        layer = ExecLimits.model_validate({k: v for k, v in layer.items() if v is not None})
    return {name: getattr(layer, name) for name in layer.model_fields_set}


def resolve(defaults: ExecLimits, *, task: Layer = None, budget: Layer = None,
            request: Layer = None) -> ExecLimits:
    """The limits a command runs under: `defaults` < `task` (may raise or lower) < `budget` < `request` (may
    only lower), per field, as the module docstring says."""
    values = defaults.model_dump()
    values.update(fields_of(task))
    for layer in (budget, request):
        for name, cap in fields_of(layer).items():
            values[name] = _lower(values[name], cap)
    return ExecLimits(**values)


def _lower(current: float | None, cap: float | None) -> float | None:
    if cap is None:
        return current
    return cap if current is None else min(current, cap)


def merged(defaults: ExecLimits, limits: ExecLimits | None) -> ExecLimits:
    """What a pool runs a command under: the fields the caller's `limits` set over the pool's `defaults`."""
    return defaults if limits is None else resolve(defaults, task=limits)


def task_layer(task: HasLimits, **verifier: float | None) -> ExecLimits:
    """The task layer of `task`: the exec limits its TaskLimits set explicitly, then what its verifier derives
    (`verifier`, ExecLimits field -> value; None leaves the field to the task)."""
    own = {ours: getattr(task.limits, theirs) for theirs, ours in TASK_FIELDS.items()
           if getattr(task.limits, theirs) is not None}
    own.update({name: value for name, value in verifier.items() if value is not None})
    return ExecLimits(**own)


def defaults_of(pool: object) -> ExecLimits:
    """The sandbox defaults a pool holds (`pool.limits`); a duck-typed double without them: ExecLimits()."""
    limits = getattr(pool, "limits", None)
    return limits if isinstance(limits, ExecLimits) else ExecLimits()


def for_task(pool: object, task: HasLimits, *, budget: Layer = None, request: Layer = None,
             **verifier: float | None) -> ExecLimits:
    """`resolve` for one command on `task` in `pool`: the pool's defaults, the task's layer (with `verifier`'s
    fields, see `task_layer`), then the budget and the request."""
    return resolve(defaults_of(pool), task=task_layer(task, **verifier), budget=budget, request=request)
