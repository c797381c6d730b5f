"""A generated code problem before it is dressed as a Task (`Problem`), and the helpers its generators share:
drawing distinct inputs, whether an expression agrees with cases, and the compact literals of the tiny tier's
prompts."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rlvr.domains.code.families import Args

EXPR_ERRORS = (ArithmeticError, LookupError, TypeError, ValueError)
"""What a table expression may raise on an input outside its domain."""


@dataclass(frozen=True)
class Problem:
    """A generated problem before it is dressed as a Task: the function, its examples and hidden cases."""

    name: str
    """Name of the function to write (`f` in the tiny tier)."""
    params: str
    """Its parameter list as written in the signature."""
    reference: str
    """Reference module source (tiny tier: the expression only)."""
    visible: list[tuple[Args, Any]]
    """(arguments, expected result) shown in the prompt and the visible tests."""
    hidden: list[tuple[Args, Any]]
    """(arguments, expected result) of the hidden tests; no arguments repeat a visible case."""
    family: str
    """Name of the problem family."""
    consts: dict[str, Any]
    """Constants drawn for the family (tiny tier: the expression)."""


def io_cases_text(p: Problem) -> str:
    """The hidden io cases of a tiny problem: one Python literal `(args, expected)` a line."""
    return "".join(f"{(args, want)!r}\n" for args, want in p.hidden)


def compact(v: Any) -> str:
    """Short literal for the tiny tier's one-line examples (no spaces in lists)."""
    if isinstance(v, list):
        return "[" + ",".join(compact(x) for x in v) + "]"
    return repr(v)


def draw_inputs(rng: random.Random, draw: Any, n: int, avoid: set[str]) -> list[Args]:
    """Up to `n` argument tuples from `draw(rng)`, all distinct and none whose repr is in `avoid`."""
    out: list[Args] = []
    seen = set(avoid)
    for _ in range(50 * n):
        args = draw(rng)
        key = repr(args)
        if key not in seen:
            seen.add(key)
            out.append(args)
            if len(out) == n:
                break
    return out


def agrees(e: Any, cases: list[tuple[Args, Any]]) -> bool:
    """Whether expression `e` gives every case's expected result, of the same type."""
    try:
        return all(type(got := e.fn(*a)) is type(w) and got == w for a, w in cases)
    except EXPR_ERRORS:  # an expression that fails on an input (e.g. s[0] on '') disagrees
        return False
