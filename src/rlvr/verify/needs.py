"""What a domain needs to judge, checked where it judges: each `Domain.needs` module is looked up by the
sandbox's own interpreter (one job in the run's pool, so a Ray pool answers from its nodes), and a run that
uses a domain whose needs are missing there is refused at start-up in one line. Without the check, a core
install without pytest masked every code episode as an infra error ("No module named pytest") and said so
only at the end."""
from __future__ import annotations

import json
from collections.abc import Iterable

from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks import registry

_FIND = ("import importlib.util, json, sys\n"
         "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))\n")


def needs_of(domains: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The declared needs of each registered domain among `domains` (unknown names and packs: none)."""
    out = {}
    for name in sorted(set(domains)):
        if registry.is_registered(name) and registry.entry(name).needs:
            out[name] = registry.entry(name).needs
    return out


def missing(pool: SandboxPool, modules: Iterable[str]) -> list[str] | None:
    """The modules the pool's interpreter cannot import (None when the check itself could not run: an infra
    fault is left to the episodes, which mask it)."""
    wanted = sorted(set(modules))
    if not wanted:
        return []
    res = pool.run(["python", "-c", _FIND, *wanted])
    try:
        found = json.loads(res.stdout.strip().splitlines()[-1]) if res.exit_code == 0 else None
    except (json.JSONDecodeError, IndexError):
        found = None
    return found if isinstance(found, list) else None


def require(pool: SandboxPool, domains: Iterable[str]) -> None:
    """Refuse, in one line, a run whose domains need modules the sandbox's interpreter lacks."""
    needs = needs_of(domains)
    lacking = missing(pool, {m for ms in needs.values() for m in ms})
    if not lacking:
        return
    who = sorted(d for d, ms in needs.items() if set(ms) & set(lacking))
    raise UserError(f"the sandbox's interpreter cannot import {', '.join(lacking)}, which domain "
                    f"{', '.join(who)} needs to judge its tasks", field="sandbox",
                    fix=f"install it there: pip install {' '.join(lacking)} (rlvr's core installs pytest)")
