"""The domain registry: `register(name, factory, config_model)`, `make(name, **config)`.

Built-in domains register themselves when `rlvr.tasks.domains` is imported; third-party packages can add
theirs through the `rlvr.domains` entry-point group (each entry point is a callable that registers).
"""
from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rlvr.errors import UserError
from rlvr.tasks.source import TaskSource


class NoConfig(BaseModel):
    """Config model of a domain that takes no settings."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class DomainEntry:
    """One registered domain."""

    name: str
    factory: Callable[..., TaskSource]
    config_model: type[BaseModel]
    description: str
    verifier: str | None
    """Verifier kind used for this domain's tasks (None: the domain name)."""


_REGISTRY: dict[str, DomainEntry] = {}
_loaded = False


def register(name: str, factory: Callable[..., TaskSource], config_model: type[BaseModel] = NoConfig,
             *, description: str = "", verifier: str | None = None) -> None:
    """Register a domain. `factory(config)` receives a validated `config_model` instance."""
    if not name or any(c.isspace() or c in ",:" for c in name):
        raise ValueError(f"invalid domain name {name!r}: no spaces, commas or colons")
    if name in _REGISTRY:
        raise ValueError(f"domain {name!r} is already registered")
    _REGISTRY[name] = DomainEntry(name, factory, config_model, description.strip().splitlines()[0]
                                  if description.strip() else "", verifier)


def unregister(name: str) -> None:
    """Remove a domain (tests and plugins that re-register)."""
    _REGISTRY.pop(name, None)


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from rlvr.tasks import domains

    domains.load_builtin()
    domains.load_plugins()


def names() -> list[str]:
    """Every registered domain name, sorted."""
    _ensure_loaded()
    return sorted(_REGISTRY)


def entry(name: str) -> DomainEntry:
    """The entry of `name`; an unknown name raises UserError with "did you mean"."""
    _ensure_loaded()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else "see `rlvr tasks list`"
        raise UserError(f"unknown domain {name!r}", field="domain", fix=hint)
    return _REGISTRY[name]


def is_registered(name: str) -> bool:
    _ensure_loaded()
    return name in _REGISTRY


def make(name: str, **config: Any) -> TaskSource:
    """Build the task source of domain `name` with validated `config`."""
    e = entry(name)
    try:
        cfg = e.config_model(**config)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{err['msg']}", field=f"{name}.{loc}",
                        fix=f"valid settings: {', '.join(e.config_model.model_fields) or 'none'}") from None
    src = e.factory(cfg)
    if not src.name:
        src.name = name
    if not src.description:
        src.description = e.description
    return src


def verifier_kind(domain: str) -> str:
    """The verifier kind for tasks of `domain` (the domain's declared verifier or its own name)."""
    if is_registered(domain):
        return _REGISTRY[domain].verifier or domain
    return domain
