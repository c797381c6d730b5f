"""Problem families of the procedural `code` domain: one-expression families (tier `tiny`) and
function-writing families (tiers `easy`, `medium`, `hard`), each a table row of named functions."""
from __future__ import annotations

import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

Args = tuple[Any, ...]


# ------------------------------------------------------------------------------------------------ tiny tier
@dataclass(frozen=True)
class Expr:
    """One candidate answer of the tiny tier: an expression over a single parameter."""

    text: str
    """The expression as the model should write it, e.g. `3*x+2`."""
    fn: Callable[[Any], Any]
    """The same expression compiled (our own trusted text)."""


@dataclass(frozen=True)
class TinyFamily:
    """A family of one-expression functions sharing a parameter name and input type."""

    name: str
    """Family name recorded in the task metadata."""
    param: str
    """Parameter name the prompt's `def f(...)` uses; it tells the model the input type."""
    exprs: tuple[str, ...]
    """Every expression of the family (the task's answer is one of them)."""
    inputs: Callable[[random.Random], Any]
    """Draws one input value."""
    weight: float
    """Relative frequency of the family in the tiny tier."""


def _small_int(rng: random.Random) -> int:
    return rng.randint(0, 12)


def draw_word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 5)))


def _digits(rng: random.Random) -> list[int]:
    return [rng.randint(0, 9) for _ in range(rng.randint(2, 4))]


def _linear_exprs() -> tuple[str, ...]:
    out = []
    for a in range(2, 10):
        for b in range(-9, 10):
            out.append(f"{a}*x" if b == 0 else f"{a}*x{b:+d}")
    return tuple(out)


TINY_FAMILIES: tuple[TinyFamily, ...] = (
    TinyFamily("linear", "x", _linear_exprs(), _small_int, 0.02),
    TinyFamily("number", "x", tuple([f"x*x{b:+d}" for b in range(1, 10)] + [f"x%{k}" for k in range(2, 10)]
                                    + [f"x//{k}" for k in range(2, 10)]), _small_int, 0.02),
    TinyFamily("string", "s", ("s[::-1]", "s.upper()", "s+s", "s[0]", "s[-1]", "s[1:]", "s[:-1]", "len(s)",
                               "s[:2]", "s[-2:]", "s+'a'", "'a'+s", "s.count('a')", "s*3"), draw_word, 0.48),
    TinyFamily("list", "xs", ("sum(xs)", "max(xs)", "min(xs)", "len(xs)", "sorted(xs)", "xs[::-1]", "xs[0]",
                              "xs[-1]", "xs+xs", "xs[1:]", "[v*2 for v in xs]", "[v+1 for v in xs]",
                              "max(xs)-min(xs)", "sum(xs)*2"), _digits, 0.48),
)
"""The tiny tier's families: reading coefficients off examples, and picking a string or list operation.

The weights favour the string and list families on purpose. The tier exists for the quickstart, whose model (a
0.8M-parameter character-level GPT-2 trained from scratch for a few minutes) learns to pick a string or list
operation from three examples but not the arithmetic of the `linear` family (slope and intercept read off the
examples) or the `number` family: after SFT it solved 0 % of linear and 3 % of number tasks against 16-24 % of
list and string ones (held-out, sampled), and RL left the first two exactly there while doubling the others.
At 40 % and 10 % of the tier they were half of every batch with no learning signal; they keep 2 % each so that
the tier still covers them (docs/BENCHMARKS.md).
"""


@cache
def compiled(param: str, exprs: tuple[str, ...]) -> tuple[Expr, ...]:
    """The family's expressions compiled once per process."""
    return tuple(Expr(e, eval(f"lambda {param}: {e}")) for e in exprs)


# ------------------------------------------------------------------------------------------ function families
@dataclass(frozen=True)
class Family:
    """A function-writing problem family, parameterised by a few constants drawn per task."""

    name: str
    """Function name the candidate must define."""
    tier: str
    """Difficulty tier: easy, medium or hard."""
    signature: str
    """Parameter list, e.g. `xs` or `a, b`."""
    doc: str
    """What the function returns; `{...}` fields are filled from the drawn constants."""
    body: str
    """Reference body (indented 4 spaces), with the same `{...}` fields."""
    consts: Callable[[random.Random], dict[str, Any]]
    """Draws the constants of one task."""
    inputs: Callable[[random.Random, dict[str, Any]], Args]
    """Draws one argument tuple for a task with these constants."""

    def describe(self, consts: dict[str, Any]) -> str:
        """The docstring with the constants filled in."""
        return fill(self.doc, consts)

    def source(self, consts: dict[str, Any]) -> str:
        """The reference solution as a module text."""
        return (f'def {self.name}({self.signature}):\n    '
                f'"""{self.describe(consts)}"""\n{fill(self.body, consts)}')

    def stub(self, consts: dict[str, Any]) -> str:
        """The workspace stub of the multi-turn form: signature and docstring, no behaviour."""
        doc = self.describe(consts)
        return f'def {self.name}({self.signature}):\n    """{doc}"""\n    return None\n'


_FIELD = re.compile(r"\{(\w+)(!r)?\}")


def fill(text: str, consts: dict[str, Any]) -> str:
    """Replace `{name}` / `{name!r}` fields of drawn constants; other braces (dict literals) stay as they
    are."""
    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in consts:
            return m.group(0)
        v = consts[m.group(1)]
        return repr(v) if m.group(2) else str(v)
    return _FIELD.sub(sub, text)


def _ints(rng: random.Random, lo: int = -9, hi: int = 20, n: tuple[int, int] = (0, 7)) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(*n))]


def _text(rng: random.Random, alphabet: str = "abcde", n: tuple[int, int] = (0, 9)) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(*n)))


def _sentence(rng: random.Random) -> str:
    return " ".join(_text(rng, string.ascii_lowercase[:8], (1, 6)) for _ in range(rng.randint(1, 5)))


def _intervals(rng: random.Random) -> list[list[int]]:
    out = []
    for _ in range(rng.randint(0, 6)):
        a = rng.randint(0, 30)
        out.append([a, a + rng.randint(0, 6)])
    return out


def _brackets(rng: random.Random) -> str:
    if rng.random() < 0.5:  # half the inputs are balanced, or the all-False answer would look right
        out: list[str] = []
        for _ in range(rng.randint(1, 4)):
            o, c = rng.choice(["()", "[]", "{}"])
            inner = "".join(out)
            out = [rng.choice(["", "x", inner]) + o + rng.choice([inner, "", "y"]) + c]
        return out[0]
    return _text(rng, "()[]{}x", (1, 10))


def _k(lo: int, hi: int, key: str = "k") -> Callable[[random.Random], dict[str, Any]]:
    return lambda rng: {key: rng.randint(lo, hi)}


FAMILIES: tuple[Family, ...] = (
    # --- easy: one loop or one library call over a list, a string or a number
    Family("count_above", "easy", "xs", "Return how many elements of the list xs are greater than {k}.",
           "    return sum(1 for v in xs if v > {k})\n", _k(0, 9), lambda r, c: (_ints(r),)),
    Family("sum_multiples", "easy", "xs", "Return the sum of the elements of xs that are divisible by {k}.",
           "    return sum(v for v in xs if v % {k} == 0)\n", _k(2, 5), lambda r, c: (_ints(r),)),
    Family("replace_char", "easy", "s", "Return s with every {a!r} replaced by {b!r}.",
           "    return s.replace({a!r}, {b!r})\n", lambda r: dict(zip("ab", r.sample("abcde", 2)))
           , lambda r, c: (_text(r),)),
    Family("clamp_all", "easy", "xs",
           "Return a new list: each element of xs limited to the range [{lo}, {hi}].",
           "    return [min(max(v, {lo}), {hi}) for v in xs]\n",
           lambda r: {"lo": (lo := r.randint(-3, 3)), "hi": lo + r.randint(2, 9)},
           lambda r, c: (_ints(r, c["lo"] - 4, c["hi"] + 4),)),
    Family("digit_sum", "easy", "n",
           "Return the sum of the decimal digits of the integer n (ignore its sign).",
           "    return sum(int(d) for d in str(abs(n)))\n", lambda r: {}, lambda r,
           c: (r.randint(-99999, 99999),)),
    Family("every_kth", "easy", "xs",
           "Return the elements of xs at positions 0, {k}, {k2}, ... (every {k}-th one).",
           "    return xs[::{k}]\n", lambda r: {"k": (k := r.randint(2, 4)), "k2": 2 * k},
           lambda r, c: (_ints(r, n=(0, 10)),)),
    Family("count_vowels", "easy", "s",
           "Return how many characters of s are vowels (a, e, i, o, u; lower case).",
           "    return sum(1 for ch in s if ch in 'aeiou')\n", lambda r: {},
           lambda r, c: (_text(r, string.ascii_lowercase, (0, 12)),)),
    Family("repeat_chars", "easy", "s", "Return s with every character repeated {k} times.",
           "    return ''.join(ch * {k} for ch in s)\n", _k(2, 4), lambda r, c: (_text(r, n=(0, 6)),)),
    Family("first_index", "easy", "xs",
           "Return the index of the first element of xs equal to {k}, or -1 if none is.",
           "    for i, v in enumerate(xs):\n        if v == {k}:\n            return i\n    return -1\n",
           _k(0, 4), lambda r, c: (_ints(r, 0, 6, (0, 8)),)),
    # --- medium: state carried across a loop, or two steps composed
    Family("run_length", "medium", "s", "Return the run-length encoding of s: each run of equal characters "
           "becomes the character followed by the run's length, e.g. 'aab' -> 'a2b1'.",
           "    out = []\n    i = 0\n    while i < len(s):\n        j = i\n        while j < len(s) and "
           "s[j] == s[i]:\n"
           "            j += 1\n        out.append(s[i] + str(j - i))\n        i = j\n    return "
           "''.join(out)\n",
           lambda r: {}, lambda r, c: (_text(r, "abc", (0, 12)),)),
    Family("rotate_right", "medium", "xs",
           "Return xs rotated right by {k} places (the last {k} elements move to "
           "the front; rotating by more than len(xs) wraps around).",
           "    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[-k:] + xs[:-k] if k "
           "else list(xs)\n",
           _k(1, 5), lambda r, c: (_ints(r, n=(0, 8)),)),
    Family("caesar", "medium", "s", "Return s with every lower-case letter shifted {k} places forward in the "
           "alphabet (z wraps to a); other characters stay as they are.",
           "    return ''.join(chr((ord(ch) - 97 + {k}) % 26 + 97) if 'a' <= ch <= 'z' else ch "
           "for ch in s)\n",
           _k(1, 25), lambda r, c: (_text(r, "abcxyz .!Q", (0, 12)),)),
    Family("dedupe", "medium", "xs",
           "Return the elements of xs without repeats, keeping the first occurrence "
           "of each, in their original order.",
           "    seen = set()\n    out = []\n    for v in xs:\n        if v not in seen:\n            "
           "seen.add(v)\n"
           "            out.append(v)\n    return out\n", lambda r: {}, lambda r,
           c: (_ints(r, 0, 5, (0, 10)),)),
    Family("chunk_sums", "medium", "xs",
           "Return the sums of consecutive chunks of {k} elements of xs (the last "
           "chunk may be shorter).",
           "    return [sum(xs[i:i + {k}]) for i in range(0, len(xs), {k})]\n", _k(2, 4),
           lambda r, c: (_ints(r, n=(0, 10)),)),
    Family("running_max", "medium", "xs", "Return the list whose i-th element is the largest of xs[0..i].",
           "    out = []\n    for v in xs:\n        out.append(v if not out else max(out[-1], v))\n    "
           "return out\n",
           lambda r: {}, lambda r, c: (_ints(r, n=(0, 9)),)),
    Family("word_lengths", "medium", "s",
           "Return the lengths of the words of s (words are separated by spaces).",
           "    return [len(w) for w in s.split()]\n", lambda r: {}, lambda r, c: (_sentence(r),)),
    # --- hard: a small algorithm
    Family("longest_run", "hard", "xs",
           "Return the length of the longest strictly increasing run of adjacent "
           "elements of xs (0 for an empty list).",
           "    best = cur = 0\n    for i, v in enumerate(xs):\n        cur = cur + 1 if i and v > xs[i - "
           "1] else 1\n"
           "        best = max(best, cur)\n    return best\n", lambda r: {}, lambda r,
           c: (_ints(r, 0, 9, (0, 12)),)),
    Family("merge_intervals", "hard", "pairs",
           "Merge overlapping closed intervals [a, b] (touching ones too) and "
           "return them sorted by start, as a list of [a, b] lists.",
           "    out = []\n    for a, b in sorted(pairs):\n        if out and a <= out[-1][1]:\n"
           "            out[-1][1] = max(out[-1][1], b)\n        else:\n            out.append([a, b])\n    "
           "return out\n",
           lambda r: {}, lambda r, c: (_intervals(r),)),
    Family("max_subarray", "hard", "xs",
           "Return the largest sum of a non-empty run of adjacent elements of the "
           "non-empty list xs.",
           "    best = cur = xs[0]\n    for v in xs[1:]:\n        cur = max(v, cur + v)\n        best = "
           "max(best, cur)\n"
           "    return best\n", lambda r: {}, lambda r, c: (_ints(r, -9, 9, (1, 10)),)),
    Family("balanced", "hard", "s",
           "Return True when the brackets (), [] and {} in s are balanced and properly "
           "nested (other characters are ignored), else False.",
           "    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n    for ch in s:\n        if ch "
           "in '([{':\n"
           "            stack.append(ch)\n        elif ch in pairs:\n            if not stack or stack.pop() "
           "!= pairs[ch]:\n"
           "                return False\n    return not stack\n", lambda r: {}, lambda r,
           c: (_brackets(r),)),
    Family("edit_distance", "hard", "a, b",
           "Return the Levenshtein distance between strings a and b (insertions, "
           "deletions and substitutions cost 1).",
           "    prev = list(range(len(b) + 1))\n    for i, ca in enumerate(a, 1):\n        cur = [i]\n"
           "        for j, cb in enumerate(b, 1):\n            cur.append(min(prev[j] + 1, cur[j - 1] + 1, "
           "prev[j - 1] + (ca != cb)))\n        prev = cur\n    return prev[-1]\n",
           lambda r: {}, lambda r, c: (_text(r, "abc", (0, 6)), _text(r, "abc", (0, 6)))),
)
"""Every function family, in a fixed order (task generation depends on it)."""

TIERS: dict[str, tuple[Family, ...]] = {
    tier: tuple(f for f in FAMILIES if f.tier == tier) for tier in ("easy", "medium", "hard")
}


@lru_cache(maxsize=4096)
def reference_fn(name: str, source: str) -> Callable[..., Any]:
    """Compile a family's reference source (our own table, never task input) into its function."""
    ns: dict[str, Any] = {}
    exec(compile(source, f"<reference {name}>", "exec"), ns)  # noqa: S102
    return ns[name]
