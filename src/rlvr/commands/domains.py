"""`rlvr domains new NAME`: scaffold a domain as a Python package of its own, found by the `rlvr.domains`
entry point.

The package it writes is complete and proves itself: a procedural source (task `i` from `Random(seed + i)`),
its settings model, a verifier, gold solutions and negative controls, tests and a README. After `pip install
-e DIR` the domain appears in `rlvr tasks list` and passes `rlvr tasks validate --domain NAME`; the author
then replaces the example task (reverse a word) with their own.
"""
from __future__ import annotations

import keyword
import re
import shutil
from pathlib import Path
from typing import Annotated

import typer

from rlvr.commands.console import err
from rlvr.errors import UserError

__all__ = ["NAME", "domains_app", "package_name", "scaffold"]

domains_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="Write your own domain: a package found by its entry point.")

NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
"""A domain name the scaffold accepts: lower-case words joined by hyphens (`invoice-audit`)."""


def package_name(name: str) -> str:
    """The Python package of domain `name`: `rlvr_` and the name in snake case."""
    return "rlvr_" + name.replace("-", "_")


def _class_prefix(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


PYPROJECT = '''[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "rlvr-{name}"
version = "0.1.0"
description = "The {name} domain for rlvr"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["rlvr"]

[project.optional-dependencies]
test = ["pytest>=8"]

# How rlvr finds the domain: an entry point in the `rlvr.domains` group naming its Domain record.
[project.entry-points."rlvr.domains"]
{name} = "{package}:DOMAIN"

[tool.setuptools.packages.find]
where = ["src"]
'''

README = '''# rlvr-{name}

The `{name}` domain for [rlvr](https://pypi.org/project/rlvr/): {description}

```bash
pip install -e .
rlvr tasks list                                # {name} is listed
rlvr tasks sample {name} -n 3                  # a few tasks
rlvr tasks validate --domain {name} -n 20      # gold solutions score 1, negative controls 0
pytest tests
```

Use it in a run config like any built-in domain:

```toml
[tasks]
train = "{name}"

[tasks.domains.{name}]
seed = 0
```

## Layout

- `src/{package}/__init__.py`: the `Domain` record (name, source, settings, verifier kind), named by the
  `rlvr.domains` entry point in `pyproject.toml`;
- `src/{package}/source.py`: the settings model and the task source: task `i` is built only from
  `Random(seed + i)`, so any task is rebuilt exactly from (domain, settings, index); `gold` is the reference
  solution, `negatives` the wrong answers the verifier must score 0;
- `src/{package}/verifier.py`: the verifier: it reads the final state and returns a `Verdict`, never raises
  for the candidate's faults;
- `tests/`: gold 1, negatives 0, determinism.

Keep reference material out of the prompt and the workspace: `answer`, `hidden` and `solution` never reach the
model.
'''

INIT = '''"""The `{name}` domain: {description}"""
from rlvr.tasks.domain import Domain, VerifierKind

from {package}.source import {cls}Settings, {cls}Source
from {package}.verifier import {cls}Verifier

DOMAIN = Domain(
    "{name}", {cls}Source, {cls}Settings, verifiers={{"{name}": VerifierKind({cls}Verifier)}},
    description="{description}")
"""The record rlvr loads through the `rlvr.domains` entry point."""
'''

SOURCE = '''"""Where the `{name}` tasks come from: task `i` is built only from `Random(seed + i)`."""
from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict

from rlvr.tasks.source import ProceduralSource
from rlvr.tasks.spec import FinalState, Task

WORDS = ("planet", "rocket", "garden", "silver", "window", "harbour", "lantern", "meadow")


class {cls}Settings(BaseModel):
    """The domain's settings: `[tasks.domains.{name}]` in a run config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Task i is built from Random(seed + i)."""


class {cls}Source(ProceduralSource):
    """Reverse a word (replace with your own tasks)."""

    name = "{name}"

    def build(self, index: int, rng: random.Random) -> Task:
        word = rng.choice(WORDS)
        return Task(id=self.id_at(index), domain="{name}", answer=word[::-1],
                    prompt=f"Reverse the word {{word!r}}. Give the final answer inside "
                           "<answer></answer> tags.", seed=self.config.seed, index=index)

    def gold(self, task: Task) -> FinalState:
        """The reference solution: the verifier must score it 1."""
        return FinalState(answer=f"<answer>{{task.answer}}</answer>")

    def negatives(self, task: Task) -> dict[str, FinalState]:
        """Wrong final states the verifier must score 0 (rlvr adds the empty answer and the echoed prompt)."""
        word = str(task.answer)[::-1]
        return {{**super().negatives(task),
                "not_reversed": FinalState(answer=f"<answer>{{word}}</answer>"),
                "hedged": FinalState(answer=f"<answer>{{word}}</answer> <answer>{{task.answer}}</answer>")}}
'''

VERIFIER = '''"""How `{name}` tasks are judged: the one marked final answer must equal the reference."""
from __future__ import annotations

from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.extract import Fallback, extract_answer, normalize_text
from rlvr.verify.verdict import Check, Verdict


class {cls}Verifier:
    """Kind `{name}`: 1 when the answer inside the tags equals the reference, else 0."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        found = extract_answer(final.answer, Fallback.none)  # two different answers are a hedge: none
        ok = found.text is not None and normalize_text(found.text) == normalize_text(str(task.answer))
        detail = found.problem or ("equal" if ok else f"expected {{task.answer!r}}, got {{found.text!r}}")
        return Verdict.from_checks([Check(name="answer", score=float(ok), passed=ok, detail=detail)])
'''

TESTS = '''"""The `{name}` domain proves itself: gold solutions score 1, negative controls 0, tasks rebuild
exactly."""
from __future__ import annotations

from rlvr.tasks import registry
from rlvr.verify.proof import prove


def test_the_domain_is_found_through_its_entry_point() -> None:
    assert "{name}" in registry.names()
    assert registry.entry("{name}").kind == "{name}"


def test_gold_scores_one_and_every_negative_zero() -> None:
    for task in registry.make("{name}", seed=1).sample(10):
        results = prove(task)
        assert results and all(r.ok for r in results), results


def test_tasks_are_rebuilt_exactly_from_seed_and_index() -> None:
    assert registry.make("{name}", seed=3).sample(5) == registry.make("{name}", seed=3).sample(5)
    assert registry.make("{name}", seed=3).get(2) == registry.make("{name}", seed=3).get(2)
'''


def scaffold(name: str, out: Path | None = None,
             description: str = "Reverse a word (an example task; replace it with your own).") -> Path:
    """Write the package of domain `name` into `out` (default `./rlvr-<name>`); returns the directory. A bad
    name or a directory that is not empty is a UserError, and nothing is written."""
    from rlvr.tasks import registry

    if not NAME.match(name) or any(keyword.iskeyword(p) for p in name.split("-")):
        raise UserError(f"invalid domain name {name!r}", field="NAME",
                        fix="lower-case words joined by hyphens, e.g. invoice-audit")
    if registry.is_registered(name):
        raise UserError(f"domain {name!r} already exists", field="NAME",
                        fix="pick another name (rlvr tasks list)")
    target = out if out is not None else Path(f"rlvr-{name}")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError("exists and is not an empty directory", file=target, fix="give -o a new directory")
    package = package_name(name)
    values = {"name": name, "package": package, "cls": _class_prefix(name), "description": description}
    files = {
        "pyproject.toml": PYPROJECT, "README.md": README, f"src/{package}/__init__.py": INIT,
        f"src/{package}/source.py": SOURCE, f"src/{package}/verifier.py": VERIFIER,
        f"tests/test_{package.removeprefix('rlvr_')}.py": TESTS,
    }
    made = not target.exists()
    try:
        for rel, template in files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(template.format(**values), encoding="utf-8")
    except BaseException:  # nothing half-written
        if made:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return target


@domains_app.command("new")
def domains_new(
    name: Annotated[str, typer.Argument(help="The domain's name: lower-case words joined by hyphens.")],
    out: Annotated[Path | None,
                   typer.Option("-o", "--output", help="Directory to write (default ./rlvr-NAME).")] = None,
) -> None:
    """Scaffold a domain package: pyproject with its entry point, source, verifier, gold, tests and README."""
    target = scaffold(name, out)
    err.print(f"wrote {target}: pip install -e {target} && rlvr tasks validate --domain {name}",
              markup=False, highlight=False, soft_wrap=True)
