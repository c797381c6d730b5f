"""The domain registry: `register(Domain(...))`, `make(name, **settings)`, and the lookups every layer shares.

Domains arrive through the `rlvr.domains` entry-point group, the built-in ones (declared in rlvr's own
pyproject.toml) exactly as third-party packages do (`rlvr domains new NAME` scaffolds one). An entry point
names a `Domain`, an iterable of them, or a callable returning either (a family computed at load time, like
the reasoning-gym domains). A plugin that fails to load is recorded as one line naming the package and its
error (`unavailable()`, shown by `rlvr tasks list`); the other domains still load. Duplicates are refused,
unknown names answered with "did you mean".

Verifier kinds that belong to no domain (`answer`: an exact final answer, for tasks of any domain) arrive the
same way, through the `rlvr.verifiers` group: an entry point named after the kind names its `VerifierKind`.
"""
from __future__ import annotations

import difflib
import importlib.metadata
import threading
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from rlvr.errors import UserError
from rlvr.tasks.domain import Domain, NoConfig, VerifierKind
from rlvr.tasks.source import TaskSource

__all__ = ["Domain", "NoConfig", "VerifierKind", "entry", "feedback_of", "is_registered", "kinds", "load",
           "make", "names", "provider", "register", "register_kind", "tools_of", "unavailable", "unregister",
           "verifier_kind", "verifier_of"]

GROUP = "rlvr.domains"
"""The entry-point group domain packages declare themselves in."""
KIND_GROUP = "rlvr.verifiers"
"""The entry-point group of verifier kinds that belong to no domain (the entry point's name is the kind's)."""
SHARED = ""
"""The owner of a kind registered by `register_kind` (no domain)."""

_DOMAINS: dict[str, Domain] = {}
_KINDS: dict[str, tuple[VerifierKind, set[str]]] = {}
"""Verifier kind -> (its record, the domains that declare it)."""
_unavailable: dict[str, str] = {}
_providers: dict[str, str] = {}
"""Domain name -> the distribution whose `rlvr.domains` entry point declared it."""
_state = {"loaded": False, "done": False}
_lock = threading.RLock()  # scorers on several threads look domains up at once


def register(domain: Domain | str, source: Any = None, settings: Any = None, *, description: str = "",
             verifier: str | None = None) -> None:
    """Register one domain and the verifier kinds it defines; a second domain of the same name, or a kind
    declared again with a different record, is refused. The older form `register(name, source, settings,
    description=..., verifier=...)` builds the same record."""
    if isinstance(domain, str):
        domain = Domain(domain, source, settings or NoConfig, description=description, verifier=verifier)
    if not isinstance(domain, Domain):
        raise TypeError(f"register() takes a Domain, got {type(domain).__name__}")
    with _lock:
        if domain.name in _DOMAINS:
            raise ValueError(f"domain {domain.name!r} is already registered")
        for kind, spec in domain.verifiers.items():
            known = _KINDS.get(kind)
            if known is not None and known[0] != spec:
                raise ValueError(f"verifier kind {kind!r} is already registered (by domain "
                                 f"{min(known[1])!r}); domain {domain.name!r} declares another")
        _DOMAINS[domain.name] = domain
        for kind, spec in domain.verifiers.items():
            _KINDS.setdefault(kind, (spec, set()))[1].add(domain.name)


def register_kind(name: str, kind: VerifierKind) -> None:
    """Register a verifier kind that no domain owns; the same name with another record is refused."""
    if not isinstance(kind, VerifierKind):
        raise TypeError(f"register_kind() takes a VerifierKind, got {type(kind).__name__}")
    with _lock:
        known = _KINDS.get(name)
        if known is not None and known[0] != kind:
            raise ValueError(f"verifier kind {name!r} is already registered (by {min(known[1]) or 'rlvr'!r})")
        _KINDS.setdefault(name, (kind, set()))[1].add(SHARED)


def unregister(name: str) -> None:
    """Remove a domain and the kinds no other domain declares (tests and plugins that re-register)."""
    with _lock:
        domain = _DOMAINS.pop(name, None)
        if domain is None:
            return
        for kind in domain.verifiers:
            owners = _KINDS[kind][1]
            owners.discard(name)
            if not owners:
                del _KINDS[kind]


def _domains_of(obj: Any) -> list[Domain]:
    """What an entry point loaded, as Domains: a Domain, an iterable of them, or a callable returning either
    (or None: a plugin of the older kind, which called `register` itself)."""
    if callable(obj) and not isinstance(obj, Domain):
        obj = obj()
        if obj is None:
            return []
    if isinstance(obj, Domain):
        return [obj]
    if isinstance(obj, Iterable) and not isinstance(obj, (str, bytes)):
        found = list(obj)
        if all(isinstance(d, Domain) for d in found):
            return found
    raise TypeError(f"expected a Domain or a list of Domains, got {type(obj).__name__}")


def _why(ep: importlib.metadata.EntryPoint, exc: BaseException) -> str:
    """One line: the package, the entry point and its error."""
    dist = getattr(ep, "dist", None)
    package = dist.name if dist is not None else ep.value.split(":")[0].split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and package == "rlvr":
        return f"rlvr: needs {exc.name} (pip install 'rlvr[domains]')"
    text = str(exc).strip().splitlines()
    return f"{package} ({ep.value}): {type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def load() -> None:
    """Load every `rlvr.domains` and `rlvr.verifiers` entry point once (the first lookup does it)."""
    if _state["done"]:
        return
    with _lock:  # a second thread waits for the first, never sees a half-filled registry
        if _state["loaded"]:  # done, or a plugin's import re-entered on this thread
            return
        _state["loaded"] = True
        for ep in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
            try:
                for domain in _domains_of(ep.load()):
                    if _DOMAINS.get(domain.name) is not domain:
                        register(domain)
                    if getattr(ep, "dist", None) is not None:
                        _providers[domain.name] = ep.dist.name
            # a broken plugin costs its own domains, never the others
            except Exception as exc:  # noqa: BLE001
                _unavailable[ep.name] = _why(ep, exc)
        for ep in sorted(importlib.metadata.entry_points(group=KIND_GROUP), key=lambda e: e.name):
            try:
                register_kind(ep.name, ep.load())
            except Exception as exc:  # noqa: BLE001  (as above: the other kinds still load)
                _unavailable[ep.name] = _why(ep, exc)
        _state["done"] = True


def unavailable() -> dict[str, str]:
    """Entry points that failed to load, each with one line naming the package and the error."""
    load()
    return dict(_unavailable)


def names() -> list[str]:
    """Every registered domain name, sorted."""
    load()
    return sorted(_DOMAINS)


def entry(name: str) -> Domain:
    """The Domain of `name`; an unknown name raises UserError with "did you mean"."""
    load()
    if name not in _DOMAINS:
        close = difflib.get_close_matches(name, list(_DOMAINS), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else "see `rlvr tasks list`"
        if _unavailable:
            hint += "; not loaded: " + "; ".join(f"{k}: {v}" for k, v in sorted(_unavailable.items()))
        raise UserError(f"unknown domain {name!r}", field="domain", fix=hint)
    return _DOMAINS[name]


def provider(name: str) -> str | None:
    """The installed distribution whose entry point declared domain `name` (a process that loads its entry
    points finds the domain there); None for a domain registered in code."""
    load()
    return _providers.get(name) if name in _DOMAINS else None


def is_registered(name: str) -> bool:
    load()
    return name in _DOMAINS


def make(name: str, **settings: Any) -> TaskSource:
    """Build the task source of domain `name` with validated `settings`."""
    d = entry(name)
    try:
        cfg = d.settings(**settings)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{err['msg']}", field=f"{name}.{loc}",
                        fix=f"valid settings: {', '.join(d.settings.model_fields) or 'none'}") from None
    src = d.source(cfg)
    if not src.name:
        src.name = name
    if not src.description:
        src.description = d.description
    return src


def verifier_kind(domain: str) -> str:
    """The verifier kind for tasks of `domain` (the domain's declared verifier or its own name)."""
    load()
    d = _DOMAINS.get(domain)
    return d.kind if d is not None else domain


def verifier_of(kind: str) -> VerifierKind | None:
    """The record of verifier kind `kind`, or None when no loaded domain declares it."""
    load()
    found = _KINDS.get(kind)
    return found[0] if found is not None else None


def kinds() -> list[str]:
    """Every verifier kind a loaded domain declares, sorted."""
    load()
    return sorted(_KINDS)


def tools_of(domain: str) -> tuple[Any, ...]:
    """The domain's own tools (`rlvr.envs.tools.Tool`); none for an unknown domain."""
    load()
    d = _DOMAINS.get(domain)
    return d.tools if d is not None else ()


def feedback_of(domain: str) -> Any:
    """The domain's check of an attempts task's answer (`Domain.feedback`); None for a domain without one."""
    load()
    d = _DOMAINS.get(domain)
    return d.feedback if d is not None else None
