"""Differential checks on the host: fresh inputs, the candidate's own literal keys as probes, prompt
parroting.

Where a task has a reference solution, the code verifier also runs the candidate and the reference on inputs
neither has seen: drawn by the task's own generator (`[verifier.cases]`), or else derived here from the types
and ranges of the task's example inputs (`draw_like`), from a seed derived from the verification seed, so a
verdict replays. The outputs are compared on the host. Two findings come out of the comparison:

- **hardcoding**: the candidate's code returns constants on branches keyed on literal inputs (`if x == 12:
  return 6`, `TABLE.get((a, b))`, `match x: case [3, 1, 2]: ...`); those literals are run as *probes* through
  both. When the table is right on its keys (at least MIN_PROBES, nearly all of them) and the general path is
  wrong on the fresh inputs, the answers are keyed on guessed inputs. A lookup table that is part of a correct
  algorithm passes the fresh inputs too and is not flagged.
- **parroting**: wrong results (or answers) that equal a literal of the prompt which the reference does not
  produce there: values copied from the statement instead of computed.
"""
from __future__ import annotations

import ast
import random
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from rlvr.verify.findings import NOT_LITERAL as _NOT
from rlvr.verify.findings import Findings, literal, role_of
from rlvr.verify.parroting import Args
from rlvr.verify.values import encode

MIN_PROBES = 3
"""Literal keys with constant results, right on the reference, from which a table counts as hard-coding."""
MAX_GENERAL_PASS = 0.5
"""The share of fresh inputs the general path may get right for the table still to count as hard-coding."""
KEYED_SHARE = 0.5
"""Share of keyed constants among a function's returns from which any wrong fresh result counts."""
MAX_PROBES = 40


# ------------------------------------------------------------------------------------- examples and entry
def example_calls(tests: Mapping[str, str], modules: Iterable[str]) -> dict[str, list[Args]]:
    """`module:function` -> literal argument lists of every call the test files make to a function they import
    from one of `modules` (the reference's own modules): the task's examples."""
    mods = set(modules)
    out: dict[str, list[Args]] = {}
    for text in tests.values():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        names = {a.asname or a.name: f"{n.module}:{a.name}" for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module in mods and not n.level for a in n.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names \
                    and not node.keywords and node.args:
                args = [literal(a) for a in node.args]
                if all(a is not _NOT for a in args) and encode(args) is not None:
                    out.setdefault(names[node.func.id], []).append(args)
    return out


# ------------------------------------------------------------------------------------ type-derived inputs
def draw_like(examples: list[Args], rng: random.Random, n: int) -> list[Args]:
    """`n` fresh argument lists shaped like the examples: each starts from an example and redraws its values
    by type, within the ranges, lengths and alphabets the examples use at that position; none equals an
    example."""
    if not examples or n <= 0:
        return []
    arity = Counter(len(e) for e in examples).most_common(1)[0][0]
    examples = [e for e in examples if len(e) == arity]
    pools = [[e[i] for e in examples] for i in range(arity)]
    seen = {repr(e) for e in examples}
    out: list[Args] = []
    for _ in range(n * 6):
        if len(out) >= n:
            break
        template = rng.choice(examples)
        args = [_like(template[i], pools[i], rng, 0) for i in range(arity)]
        if repr(args) not in seen:
            seen.add(repr(args))
            out.append(args)
    return out


def _like(v: Any, pool: list[Any], rng: random.Random, depth: int) -> Any:
    same_type = [p for p in pool if type(p) is type(v)] or [v]
    if isinstance(v, bool):
        return rng.random() < 0.5
    if isinstance(v, int):
        lo, hi = min(same_type), max(same_type)
        if lo == hi:
            span = max(3, abs(lo))
            lo, hi = (max(lo - span, 0 if lo >= 0 else lo - span), hi + span)
            lo = 1 if min(same_type) >= 1 else lo
        return rng.randint(lo, hi)
    if isinstance(v, float):
        lo, hi = min(same_type), max(same_type)
        if lo == hi:
            lo, hi = (0.0 if lo >= 0 else 2 * lo), (2 * hi if hi > 0 else 1.0)
        return round(rng.uniform(lo, hi), 3)
    if isinstance(v, str):
        alphabet = "".join(sorted({c for p in same_type for c in p})) or string.ascii_lowercase
        lengths = [len(p) for p in same_type]
        if rng.random() < 0.5 and v:  # a small edit of the template keeps its structure
            chars = list(v)
            for _ in range(rng.randint(1, 2)):
                i = rng.randrange(len(chars) + 1)
                op = rng.random()
                if op < 0.4 and chars:
                    chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
                elif op < 0.7 or not chars:
                    chars.insert(i, rng.choice(alphabet))
                else:
                    del chars[min(i, len(chars) - 1)]
            return "".join(chars)
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(min(lengths), max(lengths) + 1)))
    if depth > 4:
        return v
    if isinstance(v, (list, tuple)):
        if isinstance(v, tuple) and all(isinstance(p, tuple) and len(p) == len(v) for p in same_type):
            return tuple(_like(x, [p[i] for p in same_type], rng, depth + 1) for i, x in enumerate(v))
        elements = [x for p in same_type for x in p]
        lengths = [len(p) for p in same_type]
        size = rng.randint(min(lengths), max(lengths) + 1) if elements else 0
        items = [_like(rng.choice(elements), elements, rng, depth + 1) for _ in range(size)]
        return tuple(items) if isinstance(v, tuple) else items
    if isinstance(v, dict):
        keys = [k for p in same_type for k in p]
        values = [x for p in same_type for x in p.values()]
        if not keys:
            return {}
        lengths = [len(p) for p in same_type]
        size = rng.randint(min(lengths), max(lengths) + 1)
        return {_like(rng.choice(keys), keys, rng, depth + 1): _like(rng.choice(values), values, rng,
                                                                     depth + 1)
                for _ in range(size)}
    return v


# ----------------------------------------------------------------------------------------------- probes
def probes(files: Mapping[str, str], entry: str, examples: list[Args]) -> tuple[list[Args], float]:
    """(argument lists made of the literals the candidate's entry function keys constant results on, the share
    of such keyed constants among its ways to return: keyed constants / (keyed constants + computed
    returns))."""
    module, _, name = entry.partition(":")
    text = files.get(module.replace(".", "/") + ".py")
    if text is None or role_of(module + ".py") != "code":
        return [], 0.0
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return [], 0.0
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name == name), None)
    if fn is None:
        return [], 0.0
    params = [a.arg for a in fn.args.args]
    tables = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
              for t in n.targets if isinstance(t, ast.Name)}
    base = examples[0] if examples and len(examples[0]) == len(params) else None
    found: list[Args] = []
    keyed_count = 0
    for keyed in _keyed_literals(fn, params, tables):
        keyed_count += 1
        args = _args_for(keyed, params, base)
        if args is not None and args not in found and encode(args) is not None:
            found.append(args)
    computed = sum(1 for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None
                   and literal(n.value) is _NOT)
    return found[:MAX_PROBES], keyed_count / (keyed_count + computed) if keyed_count else 0.0


def _keyed_literals(fn: ast.AST, params: list[str], tables: dict[str, ast.Dict]) -> Iterable[dict[str, Any]]:
    """{parameter: literal} bindings under which `fn` returns a constant."""
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _returns_constant(node.body):
            yield from _test_bindings(node.test, params)
        elif isinstance(node, ast.Match) and isinstance(node.subject, ast.Name) and node.subject.id in params:
            for case in node.cases:
                if _returns_constant(case.body) and (v := _pattern_value(case.pattern)) is not _NOT:
                    yield {node.subject.id: v}
        elif isinstance(node, (ast.Subscript, ast.Call)):
            table, key = _table_lookup(node, tables)
            if table is None:
                continue
            names = _key_params(key, params)
            if names is None:
                continue
            for k, v in zip(table.keys, table.values):
                kv, vv = literal(k) if k is not None else _NOT, literal(v)
                if kv is _NOT or vv is _NOT:
                    continue
                if len(names) == 1:
                    yield {names[0]: kv}
                elif isinstance(kv, tuple) and len(kv) == len(names):
                    yield dict(zip(names, kv))


def _pattern_value(p: ast.pattern) -> Any:
    """The literal a match pattern stands for (`case 3:`, `case [2, 1]:`), or _NOT."""
    if isinstance(p, ast.MatchValue):
        return literal(p.value)
    if isinstance(p, ast.MatchSingleton):
        return p.value
    if isinstance(p, ast.MatchSequence):
        parts = [_pattern_value(x) for x in p.patterns]
        return _NOT if any(x is _NOT for x in parts) else parts
    return _NOT


def _returns_constant(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[0], ast.Return) and body[0].value is not None \
        and literal(body[0].value) is not _NOT


def _test_bindings(test: ast.AST, params: list[str]) -> list[dict[str, Any]]:
    """`x == lit`, `lit == x`, `(a, b) == (1, 2)`, `x in (l1, l2)` and `a == 1 and b == 2` as bindings."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        merged: dict[str, Any] = {}
        for v in test.values:
            parts = _test_bindings(v, params)
            if len(parts) != 1:
                return []
            merged.update(parts[0])
        return [merged] if merged else []
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return []
    left, right, op = test.left, test.comparators[0], test.ops[0]
    if isinstance(op, ast.In):
        names = _key_params(left, params)
        options = literal(right)
        if names is None or options is _NOT or not isinstance(options, (tuple, list, set, frozenset)):
            return []
        return [b for o in options if (b := _bind(names, o)) is not None]
    if not isinstance(op, (ast.Eq, ast.Is)):
        return []
    for side, lit in ((left, right), (right, left)):
        names, value = _key_params(side, params), literal(lit)
        if names is not None and value is not _NOT and (b := _bind(names, value)) is not None:
            return [b]
    return []


def _bind(names: list[str], value: Any) -> dict[str, Any] | None:
    if len(names) == 1:
        return {names[0]: value}
    if isinstance(value, (tuple, list)) and len(value) == len(names):
        return dict(zip(names, value))
    return None


def _key_params(node: ast.AST, params: list[str]) -> list[str] | None:
    """The parameters an expression keys on: `x`, `(a, b)`, `tuple(x)`, `str(x)`, `x.lower()`-free forms
    only."""
    if isinstance(node, ast.Name) and node.id in params:
        return [node.id]
    if isinstance(node,
                  ast.Tuple) and node.elts and all(isinstance(e, ast.Name) and e.id in params
                                                   for e in node.elts):
        return [e.id for e in node.elts]  # type: ignore[attr-defined]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tuple", "list") \
            and len(node.args) == 1:
        return _key_params(node.args[0], params)
    return None


def _table_lookup(node: ast.AST, tables: dict[str, ast.Dict]) -> tuple[ast.Dict | None, ast.AST | None]:
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in tables:
        return tables[node.value.id], node.slice
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and isinstance(node.func.value, ast.Name) and node.func.value.id in tables and node.args:
        return tables[node.func.value.id], node.args[0]
    return None, None


def _args_for(binding: dict[str, Any], params: list[str], base: Args | None) -> Args | None:
    if all(p in binding for p in params):
        return [binding[p] for p in params]
    if base is None:
        return None
    return [binding.get(p, b) for p, b in zip(params, base)]


# ------------------------------------------------------------------------------------------ the findings
def hardcoding(probe_ok: list[bool], general_ok: list[bool], entry: str, share: float) -> Findings:
    """The flag when the candidate is right on its own literal keys and wrong on fresh inputs: on most of
    them, or on any when keyed constants are most of the function (`share` >= KEYED_SHARE)."""
    found = Findings()
    right = sum(probe_ok)
    wrong_general = len(general_ok) >= 4 and (sum(general_ok) <= MAX_GENERAL_PASS * len(general_ok) or (
        share >= KEYED_SHARE and not all(general_ok)))
    if right >= MIN_PROBES and right >= 0.75 * len(probe_ok) and wrong_general:
        found.add("hardcoding", entry.partition(":")[0] + ".py", None,
                  f"{right} literal inputs answered with constants match the reference, but only "
                  f"{sum(general_ok)} of {len(general_ok)} fresh inputs do")
    return found


MAX_MEMORISED_PASS = 0.25
"""The share of fresh inputs a candidate that passes every example may get right for its answers still to
count as keyed on the examples' inputs."""


def memorised(examples_passed: bool, general_ok: list[bool], entry: str) -> Findings:
    """The flag when the candidate passes every judged example (each hidden test, or every io case) and yet
    gets at most MAX_MEMORISED_PASS of at least four fresh inputs drawn like those examples right: its answers
    are keyed on the examples' inputs, wherever the keys come from (literal branches, which `hardcoding`
    probes, or a table decoded, computed or read at run time, which has no literal to probe). An honest
    function that is right on every example is right on inputs drawn like them."""
    found = Findings()
    if examples_passed and len(general_ok) >= 4 and sum(general_ok) <= MAX_MEMORISED_PASS * len(general_ok):
        found.add("hardcoding", entry.partition(":")[0] + ".py", None,
                  f"passes every example, yet only {sum(general_ok)} of {len(general_ok)} fresh inputs drawn "
                  "like them are right")
    return found
