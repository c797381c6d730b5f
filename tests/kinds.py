"""Verifier kinds made in tests: a domain that declares one kind and has no tasks of its own, for tests that
judge hand-made tasks (`Task(domain="toy", verifier={"kind": KIND})`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.tasks import registry
from rlvr.tasks.domain import Domain, VerifierKind, VerifierSettings
from rlvr.tasks.source import ListSource


def kind_domain(kind: str, factory: Callable[[Any], Any],
                settings: type[VerifierSettings] = VerifierSettings) -> Domain:
    """A domain named `kind` that declares the verifier kind `kind`."""
    return Domain(kind, lambda _cfg: ListSource([]), verifiers={kind: VerifierKind(factory, settings)})


def register_kind(kind: str, factory: Callable[[Any], Any],
                  settings: type[VerifierSettings] = VerifierSettings) -> None:
    """Register `kind_domain(kind, ...)` unless a module imported twice already did."""
    if not registry.is_registered(kind):
        registry.register(kind_domain(kind, factory, settings))
