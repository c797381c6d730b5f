"""Where it is practised: the Sandbox protocol, isolated local backend, warm pool, limits."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlvr.sandbox.base import FileMap, Sandbox, SandboxPool, environment_of, in_environment
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus

if TYPE_CHECKING:
    from rlvr.config import SandboxConfig

__all__ = ["ExecLimits", "ExecResult", "ExecStatus", "FileMap", "Sandbox", "SandboxPool", "environment_of",
           "in_environment", "limits_from", "make_pool"]


def limits_from(config: SandboxConfig) -> ExecLimits:
    """The default ExecLimits of a sandbox config section: the first layer of
    `rlvr.sandbox.limits.resolve`."""
    return ExecLimits(timeout_s=config.timeout_s, memory_mb=config.memory_mb, processes=config.processes,
                      output_bytes=config.output_bytes)


def _bwrap(config: SandboxConfig, extra: dict[str, Any]) -> SandboxPool:
    from rlvr.sandbox.pool import BwrapPool

    return BwrapPool(limits_from(config), workers=config.workers, allow_network=config.allow_network,
                     image_cache=config.image_cache, image_pools=config.image_pools,
                     trust_image_python=config.trust_image_python, **extra)


def _unsafe(config: SandboxConfig, extra: dict[str, Any]) -> SandboxPool:
    import warnings

    from rlvr.sandbox.unsafe import UnsafePool

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        return UnsafePool(limits_from(config), python=extra.get("python"), allow_network=config.allow_network)


POOLS: dict[str, Callable[[SandboxConfig, dict[str, Any]], SandboxPool]] = {"bwrap": _bwrap, "none": _unsafe}
"""isolation -> pool factory."""
POOL_OPTIONS = ("python", "warm", "spares")
"""Keyword overrides that go to the pool rather than to SandboxConfig."""


def make_pool(config: SandboxConfig | None = None, **overrides: Any) -> SandboxPool:
    """The sandbox pool a config asks for: `bwrap` (isolated warm pool) or `none` (no isolation, warns
    loudly).

    `overrides` replace SandboxConfig fields (`make_pool(isolation="none", workers=1)`); `python`, `warm`
    (modules the warm workers import, default pytest) and `spares` (pre-started standby workers) tune the
    isolated pool. Bad values raise UserError. Close the pool (or use it as a context manager) when done.
    """
    from pydantic import ValidationError

    from rlvr.config import SandboxConfig
    from rlvr.errors import UserError

    extra = {k: overrides.pop(k) for k in POOL_OPTIONS if k in overrides}
    base = (config or SandboxConfig()).model_dump()
    unknown = sorted(set(overrides) - set(base))
    if unknown:
        raise UserError("unknown sandbox option", field=f"sandbox.{unknown[0]}",
                        fix=f"use one of {', '.join(sorted(base) + list(POOL_OPTIONS))}")
    try:
        cfg = SandboxConfig.model_validate({**base, **overrides})
    except ValidationError as exc:
        e = exc.errors()[0]
        raise UserError(e["msg"], field="sandbox." + ".".join(str(p) for p in e["loc"]),
                        fix=f"got {e.get('input')!r}") from None
    return POOLS[cfg.isolation](cfg, extra)
