"""The `rg-*` domains: every dataset of the reasoning-gym package as a domain of its own, found by reading the
package's sources (`source.scan_datasets`), judged by its own `score_answer` (kind `reasoning-gym`)."""
from __future__ import annotations

import functools

from rlvr.domains.reasoning_gym.source import (
    PREFIX,
    SKIPPED,
    VERIFIER_KIND,
    ReasoningGymConfig,
    ReasoningGymSource,
    scan_datasets,
)
from rlvr.domains.reasoning_gym.verifier import ReasoningGymVerifier
from rlvr.tasks.domain import Domain, VerifierKind

KIND = VerifierKind(ReasoningGymVerifier)
"""The one verifier kind every rg-* domain shares."""


def domains() -> list[Domain]:
    """One domain per reasoning-gym dataset (the entry point calls this)."""
    out = []
    for name, (category, doc) in sorted(scan_datasets().items()):
        if name in SKIPPED:
            continue
        desc = f"reasoning-gym {category}: {doc}" if doc else f"reasoning-gym {category} dataset {name}"
        out.append(Domain(PREFIX + name, functools.partial(ReasoningGymSource, name), ReasoningGymConfig,
                          verifier=VERIFIER_KIND, verifiers={VERIFIER_KIND: KIND}, description=desc))
    return out
