"""Final-answer math: a procedural generator in difficulty tiers, plus JSONL packs (one ships with rlvr).

Answers are LaTeX (integers, fractions, sets of roots, intervals) checked by `math-verify`, so `\\frac{1}{2}`,
`0.5` and `1/2` are the same answer. Task `i` is built from `Random(seed + i)`. With `pack` set, the domain
serves a JSONL pack instead: `builtin` (shipped as package data) or a path to a `.jsonl` file whose records
carry `prompt` and `answer` (and optionally `metadata.wrong`, a wrong answer of the right type).
"""
from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rlvr.errors import UserError
from rlvr.tasks.loaders import JsonlPack
from rlvr.tasks.prompts import with_instruction
from rlvr.tasks.source import ProceduralSource, TaskSource
from rlvr.tasks.spec import FinalState, Task

WRONG_FILE = "wrong_answer.txt"
"""Hidden file with a wrong answer of the right type (a negative control; hidden because it hints at the
answer)."""
BUILTIN_PACK = Path(__file__).parent / "data" / "math_pack.jsonl"
TIERS = ("easy", "medium", "hard")
Tier = Literal["easy", "medium", "hard"]


class MathConfig(BaseModel):
    """Settings of the `math` domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the generator; task i is built from Random(seed + i)."""
    tier: Tier | None = None
    """Difficulty tier of generated problems (None: the tier cycles easy, medium, hard by index)."""
    pack: str | None = None
    """Serve a JSONL pack instead of generated problems: `builtin` or a path to a .jsonl file."""


def _frac_tex(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _scale(tier: str) -> int:
    return {"easy": 9, "medium": 30, "hard": 120}[tier]


Problem = tuple[str, str, str, str]
"""(family, question, answer in LaTeX, a wrong answer of the same type)."""


def _fractions(rng: random.Random, tier: str) -> Problem:
    n = _scale(tier)
    a, b = Fraction(rng.randint(1, n), rng.randint(2, n)), Fraction(rng.randint(1, n), rng.randint(2, n))
    op = rng.choice(["+", "-"] if tier == "easy" else ["+", "-", "\\times"])
    value = a + b if op == "+" else a - b if op == "-" else a * b
    q = f"Compute ${_frac_tex(a)} {op} {_frac_tex(b)}$ and give the result as a fraction in lowest terms."
    return "fraction", q, _frac_tex(value), _frac_tex(value + Fraction(1, value.denominator + 1))


def _linear(rng: random.Random, tier: str) -> Problem:
    n = _scale(tier)
    a = rng.choice([k for k in range(-n, n + 1) if k not in (0, 1)])
    b, c = rng.randint(-n, n), rng.randint(-n, n)
    x = Fraction(c - b, a)
    q = f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {c}$."
    return "linear", q, _frac_tex(x), _frac_tex(x + 1)


def _quadratic(rng: random.Random, tier: str) -> Problem:
    n = _scale(tier) // 3 + 2
    r1, r2 = rng.sample(range(-n, n + 1), 2)
    lead = 1 if tier != "hard" else rng.choice([2, 3])
    b, c = -lead * (r1 + r2), lead * r1 * r2
    q = (f"Find the set of all real solutions of ${lead if lead > 1 else ''}x^2 "
         f"{'+' if b >= 0 else '-'} {abs(b)}x {'+' if c >= 0 else '-'} {abs(c)} = 0$. Write it as a set, "
         f"e.g. $\\{{1, 2\\}}$.")
    lo, hi = sorted((r1, r2))
    return "quadratic", q, f"\\{{{lo}, {hi}\\}}", f"\\{{{lo}, {hi + 1}\\}}"


def _inequality(rng: random.Random, tier: str) -> Problem:
    n = _scale(tier)
    a = rng.choice([k for k in range(-n // 2 - 2, n // 2 + 3) if k not in (0,)])
    b, c = rng.randint(-n, n), rng.randint(-n, n)
    strict = rng.random() < 0.5
    bound = _frac_tex(Fraction(c - b, a))
    rel = "<" if strict else "\\le"
    flip = a < 0  # dividing by a negative number flips the inequality
    if not flip:
        ans = f"(-\\infty, {bound})" if strict else f"(-\\infty, {bound}]"
        wrong = f"({bound}, \\infty)" if strict else f"[{bound}, \\infty)"
    else:
        ans = f"({bound}, \\infty)" if strict else f"[{bound}, \\infty)"
        wrong = f"(-\\infty, {bound})" if strict else f"(-\\infty, {bound}]"
    q = (f"Find all real $x$ with ${a}x {'+' if b >= 0 else '-'} {abs(b)} {rel} {c}$. "
         f"Write the answer in interval notation.")
    return "inequality", q, ans, wrong


def _arithmetic(rng: random.Random, tier: str) -> Problem:
    n = _scale(tier)
    terms = [rng.randint(1, n) for _ in range({"easy": 3, "medium": 4, "hard": 5}[tier])]
    ops = [rng.choice(["+", "-", "\\cdot"]) for _ in terms[1:]]
    expr = str(terms[0]) + "".join(f" {o} {t}" for o, t in zip(ops, terms[1:]))
    value = _evaluate(terms, ops)
    return "arithmetic", f"Compute ${expr}$.", str(value), str(value + 1)


def _evaluate(terms: list[int], ops: list[str]) -> int:
    """Value of `t0 op1 t1 ...` with multiplication before addition and subtraction."""
    total, product, sign = 0, terms[0], 1
    for op, t in zip(ops, terms[1:]):
        if op == "\\cdot":
            product *= t
        else:
            total += sign * product
            product, sign = t, (1 if op == "+" else -1)
    return total + sign * product


FAMILIES: dict[str, Callable[[random.Random, str], Problem]] = {
    "arithmetic": _arithmetic, "fraction": _fractions, "linear": _linear, "quadratic": _quadratic,
    "inequality": _inequality,
}
"""Problem families of the generator; task i picks one with its own Random(seed + i)."""


class MathSource(ProceduralSource):
    """Generated math problems, rebuilt exactly from (seed, index)."""

    name = "math"
    config: MathConfig

    def build(self, index: int, rng: random.Random) -> Task:
        tier = self.config.tier or TIERS[index % len(TIERS)]
        family = rng.choice(sorted(FAMILIES))
        _, question, answer, wrong = FAMILIES[family](rng, tier)
        return Task(id=self.id_at(index), domain="math", prompt=with_instruction(question), answer=answer,
                    tier=tier, difficulty=TIERS.index(tier) / (len(TIERS) - 1),
                    hidden={WRONG_FILE: wrong}, metadata={"family": family},
                    source=f"math:{self.config.seed}:{index}",
                    seed=self.config.seed, index=index)

    def gold(self, task: Task) -> FinalState | None:
        return math_gold(task)

    def negatives(self, task: Task) -> dict[str, FinalState]:
        return {**super().negatives(task), **math_negatives(task)}


class MathPackSource(TaskSource):
    """A JSONL pack of math tasks (records default to domain `math`), with the math controls."""

    def __init__(self, path: Path) -> None:
        self.pack = JsonlPack(path, domain="math")
        self.name = "math"
        self.description = f"math JSONL pack {path.name}"

    @property
    def size(self) -> int:
        return self.pack.size

    def id_at(self, index: int) -> str:
        return self.pack.get(index).id

    def get(self, index: int) -> Task:
        task = self.pack.get(index)
        if task.answer is None:
            raise UserError("math task without an answer", file=self.pack.path, field="answer",
                            fix='add "answer": "<LaTeX>"')
        return task

    def gold(self, task: Task) -> FinalState | None:
        return math_gold(task)

    def negatives(self, task: Task) -> dict[str, FinalState]:
        return {**super().negatives(task), **math_negatives(task)}


def math_gold(task: Task) -> FinalState | None:
    """The reference answer, marked, after a line of reasoning (so extraction is exercised too)."""
    if task.answer is None:
        return None
    return FinalState(answer=f"<think>Working it out.</think>\nSo the result is "
                             f"<answer>{task.answer}</answer>")


def math_negatives(task: Task) -> dict[str, FinalState]:
    """A wrong answer of the same type, the answer buried among wrong ones, and two hedged answers."""
    wrong = str(task.hidden.get(WRONG_FILE) or task.metadata.get("wrong") or f"{task.answer} + 1")
    return {
        "wrong_answer": FinalState(answer=f"<answer>{wrong}</answer>"),
        "buried_answer": FinalState(answer=f"<answer>{wrong} \\text{{ or }} {task.answer} "
                                           f"\\text{{ or }} 0</answer>"),
        "hedged_answers": FinalState(answer=f"<answer>{wrong}</answer> or maybe "
                                            f"<answer>{task.answer}</answer>"),
        "boxed_hedge": FinalState(answer=f"\\boxed{{{wrong}}} or \\boxed{{{task.answer}}}"),
    }


def make_source(config: MathConfig) -> TaskSource:
    if config.pack is None:
        return MathSource(config)
    path = BUILTIN_PACK if config.pack == "builtin" else Path(config.pack)
    if path.suffix != ".jsonl":
        raise UserError("a math pack must be a .jsonl file", file=path, field="math.pack",
                        fix="give `builtin` or a path to a .jsonl file")
    return MathPackSource(path)
