"""The tiny tier's attempts form (`[tasks.domains.code] tier = "tiny", mode = "attempts"`): one expression to
write from an example that does not pin it down, answered over a budget of attempts with the failing case said
back after each wrong one (`Task.attempts`, `rlvr.envs.feedback`).

The prompt shows one example, which the answer and at least `MIN_RIVALS` other expressions of its family fit
(its rivals: a first attempt cannot tell them apart). The visible cases are that example and one more input
on which every rival gives another result than the answer; the env runs them on each attempt and says what
failed. So the failing case carries what the prompt lacks: an attempt that reads it, together with the
example, can name the one expression that fits both, and one that does not read it can only guess again
among the rivals. The hidden cases, which no expression of the family fits with the visible ones unless it
is the answer, decide as in the tiny tier.

Two kinds of family. The tiny tier's string and list operations (`s[::-1]`, `max(xs)`): there the failing
case tells the operation only to a model that can work out which operation maps its input to its expected
result. And conventions (`CONVENTIONS`): the prompt's example is too long to show a padding character, the
failing case is short enough to show it, so reading the expected result is how the answer is found, and the
hidden cases (some of them short too) judge it; a first answer can only guess the character.

Gold trajectories (`gold_attempts`) teach the loop: a share of them first gives a rival, then the answer after
the feedback.
"""
from __future__ import annotations

import random
from typing import Any

from rlvr.domains.code.families import TINY_FAMILIES, TinyFamily, compiled, draw_word
from rlvr.domains.code.problem import EXPR_ERRORS, Problem, agrees, compact, draw_inputs
from rlvr.tasks.spec import Task, TaskLimits

N_SHOWN = 1
"""Examples the prompt shows."""
MIN_RIVALS = 2
"""Other expressions of the family that fit the shown example, at least: with one rival a second guess would
be right without reading anything."""
N_HIDDEN = 5
PROMPT_MAX = 160
FAMILIES = ("string", "list")
"""The tiny tier's families the form draws from: the ones the quickstart's model learns
(`families.TINY_FAMILIES` says why the arithmetic ones are left out)."""
PAD_WIDTH = 5
CONVENTIONS = (
    TinyFamily("fill", "s", tuple(f"s.ljust({PAD_WIDTH},'{c}')" for c in "pqrstuvwxyz"), draw_word, 0.48),
    TinyFamily("pad", "xs", tuple(f"(xs+[{d}]*{PAD_WIDTH})[:{PAD_WIDTH}]" for d in range(10)),
               lambda r: [r.randint(0, 9) for _ in range(r.randint(2, PAD_WIDTH))], 0.48),
)
"""The form's own families: a word or list padded to PAD_WIDTH with a character the example cannot show (an
example of full width is its own padding); a shorter input shows it."""
VISIBLE_IO = "examples.txt"
"""The workspace file of the visible cases (`[verifier] visible_io`)."""
TOKENS_PER_ATTEMPT = 48
"""The episode's token budget is this many tokens an attempt (the tiny tier's budget for its one answer)."""


def attempts_problem(rng: random.Random) -> Problem:
    """A problem whose shown example fits the answer and its rivals, whose second visible case every rival
    fails, and whose hidden cases only the answer fits together with the visible ones."""
    families = form_families()
    fam = rng.choices(families, weights=[f.weight for f in families])[0]
    exprs = compiled(fam.param, fam.exprs)
    pool = expression_pool(fam.param)
    draw = lambda r: (fam.inputs(r),)  # noqa: E731
    while True:
        target = rng.choice(exprs)
        shown = [(a, target.fn(*a)) for a in draw_inputs(rng, draw, N_SHOWN, set())]
        rivals = [e for e in exprs if e is not target and agrees(e, shown)]
        if len(rivals) < MIN_RIVALS:
            continue
        seen = {repr(a) for a, _ in shown}
        check = next((case for a in draw_inputs(rng, draw, 20, seen)
                      if (case := _case(target, a)) is not None
                      and not any(agrees(e, [case]) for e in rivals)), None)
        if check is None:
            continue
        visible = [*shown, check]
        hidden = [(a, target.fn(*a)) for a in draw_inputs(rng, draw, N_HIDDEN, seen | {repr(check[0])})]
        if len({repr(w) for _, w in hidden}) < 2:  # a constant must not pass
            continue
        if any(agrees(e, visible) and not agrees(e, hidden) for e in pool):
            continue
        if any(agrees(e, hidden) for e in rivals):  # a guess that ignored the failing case must fail
            continue
        p = Problem("f", fam.param, target.text, visible, hidden, fam.name,
                    {"expr": target.text, "rivals": [e.text for e in rivals]})
        if len(attempts_prompt(p)) <= PROMPT_MAX:
            return p


def form_families() -> list[TinyFamily]:
    """The families an attempts task is drawn from: the tiny tier's `FAMILIES` and the `CONVENTIONS`."""
    return [*(f for f in TINY_FAMILIES if f.name in FAMILIES), *CONVENTIONS]


def expression_pool(param: str) -> list[Any]:
    """Every expression over `param` of the tiny tier and the conventions: what the hidden cases must tell
    apart from the answer."""
    return [e for f in (*TINY_FAMILIES, *CONVENTIONS) if f.param == param for e in compiled(f.param, f.exprs)]


def _case(target: Any, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any] | None:
    try:
        return args, target.fn(*args)
    except EXPR_ERRORS:
        return None


def attempts_prompt(p: Problem) -> str:
    """The tiny tier's prompt with the shown example only."""
    shown = " ".join(f"f({compact(a[0])})={compact(w)}" for a, w in p.visible[:N_SHOWN])
    return f"def f({p.params}):\n    # {shown}\n    return "


def attempts_task(p: Problem, attempts: int, judge: dict[str, Any], common: dict[str, Any],
                  meta: dict[str, Any], answer_file: str) -> Task:
    """The Task of an attempts problem: the answer laid into `answer_file` as the tiny tier's, the visible
    cases in the workspace for the env's checks, up to `attempts` answers."""
    return Task(prompt=attempts_prompt(p), answer=p.reference, attempts=True,
                workspace={VISIBLE_IO: "".join(f"{(a, w)!r}\n" for a, w in p.visible)},
                verifier={"answer_file": answer_file, "answer_template": f"def f({p.params}):\n    return "
                          "{answer}\n", "visible_io": VISIBLE_IO, **judge},
                limits=TaskLimits(max_turns=attempts, max_tokens=TOKENS_PER_ATTEMPT * attempts),
                metadata={**meta, "reference_answer": p.reference}, **common)


def gold_attempts(task: Task, recoveries: float) -> list[str]:
    """The answers of the task's gold trajectory: for a share `recoveries` of tasks (drawn by the task's key)
    a rival first, which the visible cases reject, then the answer; else the answer alone. A gold trajectory
    never answers wrong after it was told what failed: that would teach ignoring the feedback."""
    answer = str(task.metadata["reference_answer"])
    rivals = list(task.metadata.get("consts", {}).get("rivals") or [])
    rng = random.Random(f"gold-attempts|{task.key}")
    if not rivals or task.limits.max_turns < 2 or rng.random() >= recoveries:
        return [answer]
    return [rng.choice(rivals), answer]
