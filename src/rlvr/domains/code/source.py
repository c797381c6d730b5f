"""The procedural `code` domain: function-writing tasks over lists, strings and numbers in four tiers,
each rebuilt exactly from (seed, index), with visible examples, hidden cases and a reference solution.

The tiny tier's hidden cases are (arguments, expected result) pairs judged by the code verifier's `io` setting
(one lean sandboxed run of the candidate, results compared on the host with exact types: cheap enough for RL
on a CPU); the other tiers' are the same kind of cases written as a hidden pytest module."""
from __future__ import annotations

import copy
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlvr.domains.code.attempts import attempts_problem, attempts_task, gold_attempts
from rlvr.domains.code.families import (
    FAMILIES,
    TIERS,
    TINY_FAMILIES,
    Args,
    Family,
    compiled,
    reference_fn,
)
from rlvr.domains.code.problem import EXPR_ERRORS, Problem, agrees, compact, draw_inputs, io_cases_text
from rlvr.domains.code.settings import CODE_PROTECTED_DEFAULT
from rlvr.errors import UserError
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits

Tier = Literal["tiny", "easy", "medium", "hard"]
SOLUTION_FILE = "solution.py"
HIDDEN_TESTS = "test_hidden.py"
IO_CASES = "io_cases.txt"
IO_TIMEOUT_S = 5.0
"""Wall-clock limit of a tiny task's verification run (one expression on five inputs)."""
VISIBLE_TESTS = "test_solution.py"
N_VISIBLE = 3
N_HIDDEN = {"tiny": 5, "easy": 6, "medium": 6, "hard": 8}
TINY_PROMPT_MAX = 160
DIFFICULTY = {"tiny": 0.1, "easy": 0.3, "medium": 0.5, "hard": 0.7}


class CodeConfig(BaseModel):
    """Settings of the procedural code domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Base seed: task i is generated from `random.Random(seed + i)`."""
    tier: Tier = "easy"
    """Difficulty tier: `tiny` (one expression, the quickstart's tier), `easy`, `medium` or `hard`."""
    partial: bool = False
    """Tiny tier: score 1 only when the answer passes every hidden case (false), or the share it passes
    (true). One expression that agrees with the expected results on some inputs does so by coincidence
    (`s[-1]` where `s[0]` was wanted, on inputs whose ends agree), and under GRPO's group normalisation such a
    share in a group of failures weighs as much as a pass, teaching the wrong expression (docs/BENCHMARKS.md,
    "Training")."""
    mode: Literal["single", "multi", "attempts"] | None = None
    """`single`: the answer is code text laid into solution.py. `multi`: the model edits a workspace with a
    stub and visible tests, using tools. `attempts` (tiny tier): the answer is written from an example that
    does not pin it down, over up to `attempts` answers, each told which visible case it failed
    (`rlvr.domains.code.attempts`). None: `single` for the tiny tier, `multi` otherwise."""
    attempts: int = Field(3, ge=2, le=8)
    """`attempts` mode: the budget of answers of one episode (the task's `limits.max_turns`)."""
    gold_recoveries: float = Field(0.5, ge=0, le=1)
    """`attempts` mode: the share of gold trajectories (SFT with `sft.source = "gold"`) that first give a
    wrong answer the example fits, then the right one after the feedback: recoveries for the warm start to
    learn from."""

    @model_validator(mode="after")
    def _attempts_tiny(self) -> CodeConfig:
        if self.mode == "attempts" and self.tier != "tiny":
            raise UserError(f"mode = \"attempts\" is a form of the tiny tier, not of {self.tier!r}",
                            field="tasks.domains.code.mode", fix='set tier = "tiny", or another mode')
        return self


# ------------------------------------------------------------------------------------------- rendering
SAME_SOURCE = '''

def _same(got, want):
    """Equal, with exactly the same types all the way down (an always-equal object does not pass)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return got == want
'''
"""The strict comparison helper written into generated test modules (types equal all the way down)."""


def _call(name: str, args: Args) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


def hidden_tests(p: Problem, task_id: str) -> str:
    """The hidden pytest module: one test per hidden case, so the score is the fraction of cases passed."""
    lines = [f'"""Hidden tests of code task {task_id}."""', f"from solution import {p.name}", SAME_SOURCE]
    for i, (args, want) in enumerate(p.hidden, 1):
        lines.append(f"\ndef test_case_{i}():\n    assert _same({_call(p.name, args)}, {want!r})\n")
    return "\n".join(lines)


def visible_tests(p: Problem) -> str:
    """The visible tests of the multi-turn form (the prompt's examples)."""
    lines = [f'"""Examples for {p.name}; run them with `python -m pytest -q`."""',
             f"from solution import {p.name}"]
    for i, (args, want) in enumerate(p.visible, 1):
        lines.append(f"\n\ndef test_example_{i}():\n    assert {_call(p.name, args)} == {want!r}")
    return "\n".join(lines) + "\n"


def lookup_source(name: str, params: str, visible: list[tuple[Args, Any]]) -> str:
    """A function right on the visible examples only (a negative control): a table keyed by the arguments."""
    table = {repr(args): want for args, want in visible}
    return f"def {name}(*args):\n    return {table!r}.get(repr(args))\n"


# ------------------------------------------------------------------------------------------- generation
def _tiny_problem(rng: random.Random) -> Problem:
    """A one-expression problem whose examples single out the answer among every expression of its type."""
    fam = rng.choices(TINY_FAMILIES, weights=[f.weight for f in TINY_FAMILIES])[0]
    pool = [e for f in TINY_FAMILIES if f.param == fam.param for e in compiled(f.param, f.exprs)]
    while True:
        target = rng.choice(compiled(fam.param, fam.exprs))
        vis_in = draw_inputs(rng, lambda r: (fam.inputs(r),), N_VISIBLE, set())
        hid_in = draw_inputs(rng, lambda r: (fam.inputs(r),), N_HIDDEN["tiny"], {repr(a) for a in vis_in})
        vis = [(a, target.fn(*a)) for a in sorted(vis_in, key=repr if fam.param != "x" else None)]
        hid = [(a, target.fn(*a)) for a in hid_in]
        if len({repr(w) for _, w in hid}) < 2:  # a constant must not pass
            continue
        if any(agrees(e, vis) and not agrees(e, hid) for e in pool):  # ambiguous examples
            continue
        p = Problem("f", fam.param, target.text, vis, hid, fam.name, {"expr": target.text})
        if len(tiny_prompt(p)) <= TINY_PROMPT_MAX:
            return p


def _function_problem(rng: random.Random, tier: str) -> Problem:
    fam: Family = rng.choice(TIERS[tier])
    consts = fam.consts(rng)
    source = fam.source(consts)
    fn = reference_fn(fam.name, source)
    while True:
        vis_in = draw_inputs(rng, lambda r: fam.inputs(r, consts), N_VISIBLE, set())
        hid_in = draw_inputs(rng, lambda r: fam.inputs(r, consts), N_HIDDEN[tier], {repr(a) for a in vis_in})
        vis = [(a, fn(*copy.deepcopy(a))) for a in vis_in]
        hid = [(a, fn(*copy.deepcopy(a))) for a in hid_in]
        if len({repr(w) for _, w in hid}) >= 2:
            return Problem(fam.name, fam.signature, source, vis, hid, fam.name, consts)


def _problem(rng: random.Random, tier: str, mode: str) -> Problem:
    if mode == "attempts":
        return attempts_problem(rng)
    return _tiny_problem(rng) if tier == "tiny" else _function_problem(rng, tier)


def tiny_prompt(p: Problem) -> str:
    shown = " ".join(f"f({compact(a[0])})={compact(w)}" for a, w in p.visible)
    return f"def f({p.params}):\n    # {shown}\n    return "


def _function_prompt(p: Problem, doc: str, mode: str) -> str:
    examples = "\n".join(f"    {_call(p.name, a)} == {w!r}" for a, w in p.visible)
    head = f"Write a Python function `{p.name}({p.params})`. {doc}\n\nExamples:\n{examples}\n"
    if mode == "single":
        return head + "\nAnswer with the complete function definition (plain Python, no explanation).\n"
    return (head + f"\nImplement it in `{SOLUTION_FILE}`. The examples are the tests in `{VISIBLE_TESTS}` "
            "(run `python -m pytest -q`); hidden tests with other inputs decide. Do not edit the tests.\n")


def _module(p: Problem) -> tuple[str, str, str]:
    """(reference module, workspace stub, description) of a problem; a tiny one becomes a one-line
    function."""
    if p.name == "f":
        return (f"def f({p.params}):\n    return {p.reference}\n", f"def f({p.params}):\n    return None\n",
                "Infer what it computes from the examples.")
    fam = _FAMILY_BY_NAME[p.name]
    return p.reference, fam.stub(p.consts), fam.describe(p.consts)


_FAMILY_BY_NAME = {f.name: f for f in FAMILIES}


class CodeSource(TaskSource):
    """Procedural code tasks of one tier and mode; task i comes from `Random(seed + i)`."""

    def __init__(self, cfg: CodeConfig) -> None:
        self.cfg = cfg
        self.mode = cfg.mode or ("single" if cfg.tier == "tiny" else "multi")
        self.name = "code"
        self.description = f"procedural function-writing tasks (tier {cfg.tier}, {self.mode}-turn)"

    @property
    def size(self) -> None:
        return None

    def id_at(self, index: int) -> str:
        return f"{self.cfg.tier}-{self.mode}-s{self.cfg.seed}-{index}"

    def get(self, index: int) -> Task:
        if index < 0:
            raise UserError(f"code task index must be >= 0, got {index}", field="index",
                            fix="use code:0, code:1, ...")
        rng = random.Random(self.cfg.seed + index)
        tier = self.cfg.tier
        p = _problem(rng, tier, self.mode)
        task_id = self.id_at(index)
        if tier == "tiny":
            hidden = {IO_CASES: io_cases_text(p)}
            judge: dict[str, Any] = {"io": {"file": IO_CASES, "entry": f"{SOLUTION_FILE[:-3]}:{p.name}",
                                            "partial": self.cfg.partial}, "timeout_s": IO_TIMEOUT_S}
        else:
            hidden, judge = {HIDDEN_TESTS: hidden_tests(p, task_id)}, {"tests": [HIDDEN_TESTS]}
        common: dict[str, Any] = {
            "id": task_id, "domain": "code", "hidden": hidden, "tier": tier,
            "difficulty": DIFFICULTY[tier], "source": f"code:{self.cfg.seed}:{index}", "seed": self.cfg.seed,
            "index": index}
        meta = {"family": p.family, "consts": p.consts, "mode": self.mode, "function": p.name,
                "visible": [[list(a), w] for a, w in p.visible]}
        if self.mode == "attempts":
            return attempts_task(p, self.cfg.attempts, judge, common, meta, SOLUTION_FILE)
        module, stub, doc = _module(p)
        if self.mode == "single":
            template = (f"def f({p.params}):\n    return {{answer}}\n" if tier == "tiny" else "{answer}\n")
            prompt = tiny_prompt(p) if tier == "tiny" else _function_prompt(p, doc, "single")
            return Task(prompt=prompt, answer=p.reference,
                        verifier={"answer_file": SOLUTION_FILE, "answer_template": template, **judge},
                        limits=TaskLimits(max_tokens=48 if tier == "tiny" else 768),
                        metadata={**meta, "reference_answer": p.reference}, **common)
        return Task(prompt=_function_prompt(p, doc, "multi"),
                    workspace={SOLUTION_FILE: stub, VISIBLE_TESTS: visible_tests(p)},
                    solution={SOLUTION_FILE: module}, verifier=judge,
                    protected=CODE_PROTECTED_DEFAULT,
                    limits=TaskLimits(max_turns=12, max_tokens=4096, wall_s=300.0),
                    metadata={**meta, "reference_answer": module}, **common)

    def gold(self, task: Task) -> FinalState | None:
        if task.solution is not None or "reference_answer" not in task.metadata:
            return super().gold(task)  # on-disk code tasks carry their own solution/
        return FinalState(answer=reference(task))

    def gold_attempts(self, task: Task) -> list[str]:
        if task.metadata.get("mode") != "attempts":
            return super().gold_attempts(task)
        return gold_attempts(task, self.cfg.gold_recoveries)

    def negatives(self, task: Task) -> dict[str, FinalState]:
        """Base controls plus: a wrong answer of the right type, the right answer buried among wrong ones, and
        a solution right on the visible examples only. On-disk code tasks (no generator metadata) get the
        base controls."""
        out = super().negatives(task)
        if "function" not in task.metadata:
            return out
        for name, code in wrong_answers(task).items():
            if task.solution is not None:
                out[name] = FinalState(files={**task.workspace, SOLUTION_FILE: code})
            else:
                out[name] = FinalState(answer=code)
        if task.solution is not None:
            tampered = {VISIBLE_TESTS: "def test_example_1():\n    assert True\n"}
            out["tampered_tests"] = FinalState(files={**task.workspace, **tampered})
        return out


def reference(task: Task) -> str:
    """The gold answer of a code task: the expression (tiny tier) or the reference module."""
    return str(task.metadata["reference_answer"])


def _perturb_source(name: str, ref: str) -> str:
    """The reference with every result nudged to a different value of the same type."""
    return (ref.replace(f"def {name}(", f"def _ref_{name}(", 1)
            + f"\n\ndef {name}(*args):\n    r = _ref_{name}(*args)\n"
            "    if isinstance(r, bool):\n        return not r\n    if isinstance(r, (int, float)):\n"
            "        return r + 1\n    if isinstance(r, str):\n        return r + 'z'\n"
            "    return r + r[:1] if r else [0]\n")


def wrong_answers(task: Task) -> dict[str, str]:
    """Code-specific negative controls as answer text (tiny single-turn: expressions; else module sources)."""
    meta = task.metadata
    name = str(meta["function"])
    visible = [(tuple(a), w) for a, w in meta["visible"]]
    if task.tier == "tiny":
        param = task.prompt.split("(", 1)[1].split(")",
                                                   1)[0] if meta["mode"] != "multi" else _tiny_param(task)
        ref = str(meta["consts"]["expr"])
        hidden = _hidden_cases(task)
        pool = compiled(param, tuple(x for f in TINY_FAMILIES if f.param == param for x in f.exprs))
        wrong = next((e.text for e in pool if _is_same_type(e, hidden)
                      and not any(agrees(e, [c]) for c in hidden)),
                     _tiny_perturbed(ref, hidden[0][1]))
        if meta["mode"] != "multi":
            table = {repr(a[0]): w for a, w in visible}
            return {"wrong_answer": wrong, "buried_answer": f"{wrong}\n{ref}\n{wrong}",
                    "visible_only": f"{table!r}.get(repr({param}))"}
        ref_module, wrong_module = (f"def f({param}):\n    return {e}\n" for e in (ref, wrong))
        params = param
    else:
        params = _FAMILY_BY_NAME[name].signature
        ref_module = reference(task)
        wrong_module = _perturb_source(name, ref_module)
    return {"wrong_answer": wrong_module, "buried_answer": f"{ref_module}\n\n{wrong_module}",
            "visible_only": lookup_source(name, params, visible)}


def _tiny_param(task: Task) -> str:
    return task.workspace[SOLUTION_FILE].split("(", 1)[1].split(")", 1)[0]


def _tiny_perturbed(ref: str, want: Any) -> str:
    """The reference expression nudged to another value of the same type (when no family member fails all)."""
    suffix = {int: "+1", str: "+'z'", list: "+[0]"}[type(want)]
    return f"({ref}){suffix}"


def _is_same_type(e: Any, cases: list[tuple[Args, Any]]) -> bool:
    try:
        return all(type(e.fn(*a)) is type(w) for a, w in cases)
    except EXPR_ERRORS:  # fails on some input: not a plausible answer of the right type
        return False


def _hidden_cases(task: Task) -> list[tuple[Args, Any]]:
    """The hidden cases of a task, regenerated from its (seed, index) (they are not kept in metadata)."""
    src = CodeSource(CodeConfig(seed=int(task.seed or 0), tier=task.tier or "tiny",  # type: ignore[arg-type]
                                mode=task.metadata.get("mode")))
    rng = random.Random(src.cfg.seed + int(task.index or 0))
    return _problem(rng, str(task.tier), src.mode).hidden
