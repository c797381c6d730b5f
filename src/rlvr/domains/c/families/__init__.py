"""The c domain's task families: each is a small C module (a header, the reference source, the source the
task starts from) with a Python model of what it must do, from which cases are drawn.

A case is a block of C statements that calls the module and prints what it got through `emit` (a printf
that the visible tests collect into a buffer and the hidden harness writes to its output), together with the
exact text the Python model says it must print. Every case is a short scenario with at least one call that
the task's starting source gets wrong, so the untouched workspace fails every case, and a fix's partial
credit counts only real progress.

The base of a family is in `base`; this package gathers the families.
"""
from __future__ import annotations

from rlvr.domains.c.families.base import Family
from rlvr.domains.c.families.containers import FAMILIES as CONTAINERS
from rlvr.domains.c.families.parsing import FAMILIES as PARSING
from rlvr.domains.c.families.strings import FAMILIES as STRINGS
from rlvr.domains.c.families.structures import FAMILIES as STRUCTURES


def registry() -> dict[str, Family]:
    """Every family by name."""
    found: dict[str, Family] = {}
    for fam in (*STRINGS, *PARSING, *STRUCTURES, *CONTAINERS):
        found[fam.name] = fam
    return found
