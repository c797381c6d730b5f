"""Where Blender lives: its own interpreter (a venv with `bpy`), and the sandbox pool that runs it.

Blender is large and not meant to share an interpreter with a trainer, so it gets a venv of its own
(`make blender` builds `.venv-blender/`); the sandbox runs that venv's python (the pool mounts the chosen
interpreter's prefix read-only). Found, in order: `$RLVR_BLENDER_PYTHON`, this interpreter when it has `bpy`
(`pip install 'rlvr[blender]'`), `.venv-blender/bin/python` under the working directory or the source
checkout.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from pathlib import Path

from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.verify.base import VerifyContext

ENV_VAR = "RLVR_BLENDER_PYTHON"
VENV = ".venv-blender"
MISSING_FIX = "run `make blender` (builds .venv-blender with bpy 5.0.1), or pip install 'rlvr[blender]'"
BLENDER_TIMEOUT_S = 60.0
BLENDER_MEMORY_MB = 2048
"""The Blender pool's defaults (tasks set the same): importing bpy maps about 400 MiB, Cycles at 64x64 and 8
samples takes under a second, and a scene script with a glTF export a few seconds on a loaded machine."""


WARM = ("bpy",)
"""What the Blender pool's workers import before any job: each job forks an interpreter in which Blender has
started (factory state, nothing run yet) instead of starting Blender, about a second on a quiet machine."""


def blender_python() -> str | None:
    """The interpreter that has `bpy`, or None when Blender is not installed."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env if os.path.isfile(env) else None
    if importlib.util.find_spec("bpy") is not None:
        return sys.executable
    roots = [Path.cwd(), Path(__file__).resolve().parents[4]]
    for root in roots:
        candidate = root / VENV / "bin" / "python"
        if candidate.is_file() and any((root / VENV / "lib").glob("python3*/site-packages/bpy")):
            return str(candidate)
    return None


def require_blender() -> str:
    """The Blender interpreter, or a UserError naming `make blender`."""
    python = blender_python()
    if python is None:
        raise UserError("Blender (bpy) is not installed", field=ENV_VAR, fix=MISSING_FIX)
    return python


_POOLS: dict[str, SandboxPool] = {}
_LOCK = threading.Lock()


def blender_pool(ctx: VerifyContext) -> SandboxPool:
    """The pool that runs Blender: `ctx.extras["blender_pool"]`, `ctx.pool` when its interpreter is Blender's,
    else one process-wide isolated pool on Blender's interpreter (two workers, Blender-sized limits)."""
    given = ctx.extras.get("blender_pool")
    if given is not None:
        return given  # type: ignore[return-value]
    python = require_blender()
    if ctx.pool is not None and os.path.abspath(str(getattr(ctx.pool, "python",
                                                            ""))) == os.path.abspath(python):
        return ctx.pool
    with _LOCK:
        if python not in _POOLS:
            _POOLS[python] = _pool(python, 2)
        return _POOLS[python]


def make_blender_pool(workers: int = 2, warm: tuple[str, ...] = WARM) -> SandboxPool:
    """A fresh isolated pool on Blender's interpreter (tests and benchmarks; close it when done); `warm=()`
    starts Blender afresh for every command (the benchmark's baseline)."""
    return _pool(require_blender(), workers, warm)


def _pool(python: str, workers: int, warm: tuple[str, ...] = WARM) -> SandboxPool:
    from rlvr.sandbox import make_pool

    return make_pool(python=python, warm=warm, spares=0, workers=workers, timeout_s=BLENDER_TIMEOUT_S,
                     memory_mb=BLENDER_MEMORY_MB)
