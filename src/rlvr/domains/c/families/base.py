"""The base of the c domain's families: a `Family` is a small C module with a Python model of it, a `Case`
one scenario drawn from it (the package docstring says more), and the helpers that write C literals."""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

TIERS = ("easy", "medium", "hard")
"""The tiers, easiest first."""


@dataclass(frozen=True)
class Case:
    """One scenario: C statements and the output they must print."""

    code: str
    """Statements (a block's body) that call the module and `emit` what they get."""
    expect: str
    """The exact output."""
    label: str
    """A short description, for the visible tests and a verdict's details."""


def c_str(s: str | None) -> str:
    """A C string literal for `s` (NULL for None)."""
    if s is None:
        return "NULL"
    out = []
    for ch in s:
        out.append({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}.get(ch, ch))
    return '"' + "".join(out) + '"'


def c_char(ch: str) -> str:
    """A C character literal for one character."""
    return "'" + c_str(ch)[1:-1].replace("'", "\\'") + "'"


def shown(s: str | None) -> str:
    """How `emit_str` prints a string: `[text]`, or `(null)`."""
    return "(null)" if s is None else f"[{s}]"


class Family(ABC):
    """A kind of task: a module to implement or fix, with its model and case drawer."""

    name: str
    """Registry name (also the task ids' prefix)."""
    tier: str
    """easy, medium or hard."""
    kind: str
    """`implement` (the source starts as a stub) or `fix` (it starts with a bug)."""
    module: str
    """File stem of the module: include/<module>.h, src/<module>.c, tests/test_<module>.c."""
    fresh_kinds: tuple[str, ...] = ()
    """What goes wrong in the starting source, for the prompt of a fix task (empty for implement)."""

    @abstractmethod
    def params(self, rng: random.Random) -> dict[str, Any]:
        """The task's parameters, drawn from `rng` (plain JSON values)."""

    @abstractmethod
    def header(self, p: dict[str, Any]) -> str:
        """include/<module>.h."""

    @abstractmethod
    def gold(self, p: dict[str, Any]) -> str:
        """The reference src/<module>.c."""

    @abstractmethod
    def start(self, p: dict[str, Any]) -> str:
        """The src/<module>.c the task starts from (a stub, or a source with a bug)."""

    @abstractmethod
    def wrong(self, p: dict[str, Any]) -> str:
        """A plausible wrong src/<module>.c that fails every case (a negative control)."""

    @abstractmethod
    def case(self, p: dict[str, Any], rng: random.Random) -> Case:
        """One scenario drawn from `rng`."""

    @abstractmethod
    def describe(self, p: dict[str, Any]) -> str:
        """What the module must do, for the prompt (the header holds the exact signatures)."""

    def cases(self, p: dict[str, Any], rng: random.Random, n: int) -> list[Case]:
        """`n` scenarios drawn from `rng`."""
        return [self.case(p, rng) for _ in range(n)]
