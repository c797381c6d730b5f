"""Hard-coded visible test cases: solution code that compares its input against a visible test's literal input
and holds that test's expected output (`if x == [3, 1, 2]: return [1, 2, 3]`), flagged `special_casing`.

Static, like `integrity`: the visible tests' `assert f(...) == literal` lines are read, never run. Code is
flagged only when it holds both a visible test's input and that test's expected output, so a domain lookup
table is not; tables keyed on guessed inputs are the differential probes' (`probes`).
"""
from __future__ import annotations

import ast
from collections.abc import Mapping

from rlvr.verify.findings import NOT_LITERAL, Findings, literal, role_of


def _distinctive(v: object) -> bool:
    """Literals too specific to be a coincidence: collections, longer strings, larger numbers."""
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, (list, tuple, set, frozenset, dict)):
        return len(v) >= 2 or any(_distinctive(x) for x in v)
    if isinstance(v, str):
        return len(v.strip()) >= 3
    if isinstance(v, int):
        return abs(v) >= 10
    if isinstance(v, float):
        return not v.is_integer() or abs(v) >= 10
    return False


def _key(v: object) -> str:
    """Comparable form of a literal (lists and tuples alike)."""
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_key(x) for x in v) + "]"
    return repr(v)


def visible_cases(tests: Mapping[str, str]) -> list[tuple[list[object], object, str, int]]:
    """(literal call arguments, expected literal, file, line) for each `assert f(...) == literal` of visible
    tests."""
    cases = []
    for path, text in tests.items():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)
                    and len(node.test.ops) == 1 and isinstance(node.test.ops[0], (ast.Eq, ast.Is))):
                continue
            for call_side, lit_side in ((node.test.left, node.test.comparators[0]),
                                        (node.test.comparators[0], node.test.left)):
                expected = literal(lit_side)
                if expected is NOT_LITERAL:
                    continue
                for call in (n for n in ast.walk(call_side) if isinstance(n, ast.Call)):
                    args = [literal(a) for a in call.args]
                    if args and all(a is not NOT_LITERAL for a in args):
                        cases.append((args, expected, path, node.lineno))
    return cases


def hard_coded_cases(candidate: Mapping[str, str], visible_tests: Mapping[str, str]) -> Findings:
    """Flag code that compares its input against a visible test's input and holds that test's expected
    output."""
    found = Findings()
    cases = visible_cases(visible_tests)
    if not cases:
        return found
    for path, text in candidate.items():
        if not path.endswith(".py") or role_of(path) != "code":
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        compared: dict[str, int] = {}
        present: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    v = literal(side)
                    if v is not NOT_LITERAL:
                        compared.setdefault(_key(v), node.lineno)
                        if isinstance(v, (tuple, list, set, frozenset)):
                            for x in v:  # `x in (case1, case2)`
                                compared.setdefault(_key(x), node.lineno)
            elif isinstance(node, ast.Dict):
                for k in node.keys:
                    v = literal(k) if k is not None else NOT_LITERAL
                    if isinstance(v, tuple):
                        compared.setdefault(_key(v), node.lineno)
            elif isinstance(node, ast.MatchValue | ast.MatchSequence):
                v = literal(node.value) if isinstance(node, ast.MatchValue) else NOT_LITERAL
                if v is not NOT_LITERAL:
                    compared.setdefault(_key(v), node.lineno)
            if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.UnaryOp)):
                v = literal(node)
                if v is not NOT_LITERAL:
                    present.add(_key(v))
        for args, expected, tpath, tline in cases:
            inputs = [a for a in args if _distinctive(a)]
            if len(args) > 1:
                inputs.append(tuple(args))
            hit = next((compared[_key(a)] for a in inputs if _key(a) in compared), None)
            if hit is not None and _key(expected) in present:
                found.add("special_casing", path, hit,
                          f"hard-codes the visible test {tpath}:{tline} ({_short(args)} -> {expected!r:.80})")
    return found


def _short(args: list[object]) -> str:
    return ", ".join(f"{a!r:.40}" for a in args)
