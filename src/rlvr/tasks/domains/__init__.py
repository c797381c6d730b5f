"""Built-in domains: one module per domain, each registering itself on import.

A module whose optional dependencies (the `rlvr[domains]` extra) are missing is skipped and listed in
`unavailable()`, so the core keeps working without them.
"""
from __future__ import annotations

import importlib
import importlib.metadata

BUILTIN_MODULES: tuple[str, ...] = (
    "code",
    "humaneval",
    "math",
    "reasoning_gym",
    "extraction",
    "config",
    "rules",
    "mesh",
    "blender",
    "repo",
    "repo_real",
)

_unavailable: dict[str, str] = {}


def load_builtin() -> None:
    """Import every built-in domain module that exists and whose dependencies are installed."""
    for mod in BUILTIN_MODULES:
        name = f"{__name__}.{mod}"
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the module itself has not been written (yet)
                continue
            _unavailable[mod] = f"needs {exc.name} (pip install 'rlvr[domains]')"


def load_plugins() -> None:
    """Call every `rlvr.domains` entry point (third-party domains)."""
    for ep in importlib.metadata.entry_points(group="rlvr.domains"):
        ep.load()()


def unavailable() -> dict[str, str]:
    """Built-in domains skipped because an optional dependency is missing, with the reason."""
    return dict(_unavailable)
