"""Parroting: wrong values copied from the task's statement instead of computed, in a program's results (the
code domain's differential check) or in a final answer (the answer domains).

A value counts as copied when it is a literal of the prompt (a number, a quoted string, a bracketed literal)
that the right answer is not, and, for a program, when it cannot be read off the call's own arguments (an
element, a key, a length, a slice: `read_off`), unless the program returns one value for every input.
"""
from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable
from typing import Any

from rlvr.verify.findings import NOT_LITERAL as _NOT
from rlvr.verify.findings import Findings
from rlvr.verify.values import same

Args = list[Any]


TRIVIAL = frozenset({repr(v) for v in (None, True, False, 0, 1, -1, 0.0, 1.0, "", (), [], {})})


def _key(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_key(x) for x in v) + "]"
    if isinstance(v, float) and v.is_integer():
        return repr(int(v))
    return repr(v)


def prompt_literals(prompt: str, extra: Iterable[Any] = ()) -> set[str]:
    """Comparable keys of the literals of a task statement: numbers, quoted strings, bracketed literals (and
    `extra` values, such as the examples' expected results); trivial values (0, 1, empty, booleans) left
    out."""
    return {k for v in extra if (k := _key(v)) not in TRIVIAL} | _statement_literals(prompt)


@functools.lru_cache(maxsize=4096)
def _statement_literals(prompt: str) -> frozenset[str]:
    """`prompt_literals` of the statement alone, parsed once per task statement (every sample of a group,
    every visit of a task, asks again)."""
    values: list[Any] = []
    for m in re.finditer(r"(?<![\w.])-?\d+(?:\.\d+)?(?!\w|\.\d)", prompt):
        values.append(float(m.group()) if "." in m.group() else int(m.group()))
    for m in re.finditer(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"|`([^`\n]{1,200})`", prompt):
        text = next(g for g in m.groups() if g is not None)
        values.append(text)
        v = _parse(text)
        if v is not _NOT:
            values.append(v)
    for opener, closer in ("[]", "()", "{}"):
        for start in (i for i, c in enumerate(prompt) if c == opener):
            end = _balanced(prompt, start, opener, closer)
            if end is not None:
                v = _parse(prompt[start:end + 1])
                if v is not _NOT:
                    values.append(v)
    return frozenset(k for v in values if (k := _key(v)) not in TRIVIAL)


def _parse(text: str) -> Any:
    if len(text) > 2000:
        return _NOT
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT


def _balanced(text: str, start: int, opener: str, closer: str) -> int | None:
    depth = 0
    for i in range(start, min(len(text), start + 2000)):
        depth += (text[i] == opener) - (text[i] == closer)
        if depth == 0:
            return i
    return None


def parroting(results: list[tuple[Any, Any]], literals: set[str], where: str,
              inputs: list[Args] | None = None) -> Findings:
    """The flag when most wrong results (got, want) are literals of the prompt the reference did not produce.

    `inputs` (the arguments of each result's call, aligned with `results`) clears a wrong result that can be
    read off its own call's arguments: an argument, an element or key of one at any depth, a contiguous part
    of a string or list one, or the length of one. Such a value was taken from the input, which is computing,
    if wrongly (`xs[-1]` where the task wanted `max(xs)`); that the prompt's examples hold the same small
    digits or letters is coincidence. What is left is a value that came from nowhere but the prompt. A
    candidate that returns one value for every input (three or more) is not excused where an input happens to
    hold it: the value came from the prompt, not from the inputs."""
    found = Findings()
    calls: list[Args] = inputs if inputs is not None else [[] for _ in results]
    if len(calls) != len(results):
        raise ValueError(f"{len(results)} results but {len(calls)} inputs")
    wrong = [(g, args) for (g, w), args in zip(results, calls) if not same(g, w)]
    constant = len(wrong) >= 3 and len({_key(g) for g, _ in wrong}) == 1  # one value whatever the input
    # a literal returned where no argument holds it came from the prompt, and so did each other time it is
    # returned, whatever those inputs hold: a table of the prompt's answers alternated over inputs is no less
    # copied where an input happens to contain one of them
    unexplained = {_key(g) for g, args in wrong if _key(g) in literals and not read_off(g, args)}
    copied = [g for g, args in wrong if _key(g) in literals and (constant or _key(g) in unexplained)]
    # a trivial fallback (None, 0, -1, "", []) where the copied table has no entry computes nothing either:
    # the share is of the wrong results that carry a value
    valued = [g for g, _ in wrong if _key(g) not in TRIVIAL]
    if len(copied) >= 2 and len(copied) * 2 >= len(valued):
        found.add("parroting", where, None,
                  f"{len(copied)} of {len(wrong)} wrong results are literals of the "
                  f"prompt (e.g. {copied[0]!r:.60}) that the reference does not produce")
    return found


READ_OFF_LIMIT = 20_000
"""Parts of a call's arguments looked at for `read_off` (deeper or larger arguments are not searched
further)."""


def read_off(value: Any, args: Args) -> bool:
    """Whether `value` can be read off a call's arguments: equal to one of them, to an element or key of one
    at any depth or to its length, or a contiguous part of a string or list one."""
    want = _key(value)
    stack: list[Any] = list(args)
    looked = 0
    while stack and looked < READ_OFF_LIMIT:
        part = stack.pop()
        looked += 1
        if _key(part) == want:
            return True
        if isinstance(part, (str, list, tuple, dict, set, frozenset)):
            if type(value) is int and value == len(part):
                return True
            if isinstance(part, str) and isinstance(value, str) and value and value in part:
                return True
            if isinstance(part, (list, tuple)) and isinstance(value, (list, tuple)) and _contiguous(value,
                                                                                                    part):
                return True
            if not isinstance(part, str):
                stack.extend([*part.keys(), *part.values()] if isinstance(part, dict) else part)
    return False


def _contiguous(sub: list | tuple, seq: list | tuple) -> bool:
    n = len(sub)
    if not n or n > len(seq) or len(seq) > 1000:
        return False
    keys = [_key(x) for x in seq]
    target = [_key(x) for x in sub]
    return any(keys[i:i + n] == target for i in range(len(seq) - n + 1))


def answer_parroting(answer: str, prompt: str, gold: str) -> Findings:
    """For an answer domain: a wrong answer equal to a literal of the prompt, where the right answer is not
    one (a task that asks to pick from the statement is not parroted by a wrong pick)."""
    found = Findings()
    literals = prompt_literals(prompt)
    key, gold_key = _answer_key(answer), _answer_key(gold)
    if key != gold_key and key in literals and gold_key not in literals and _distinctive(answer):
        found.add("parroting", None, None, f"the answer {answer.strip()!r:.60} is copied from the prompt")
    return found


def _answer_key(text: str) -> str:
    v = _parse(text.strip())
    return _key(v) if v is not _NOT else _key(" ".join(text.split()))


def _distinctive(text: str) -> bool:
    v = _parse(text.strip())
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return abs(v) >= 10 or not float(v).is_integer()
    return len(text.strip()) >= 3
