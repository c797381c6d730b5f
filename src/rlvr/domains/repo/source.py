"""The `repo` domain: bug-fix and small-feature tasks in small multi-file Python projects, SWE-smith style.

Each task is one mutant from `projects/manifest.json`: a bug injected by an ast mutation operator (or a
documented function's body removed, for a feature task) into a project whose original passes its whole test
suite, kept only when it breaks at least one test. The model works over several turns in the project; the
verifier runs a pristine copy of the project's tests from hidden/: the fail-to-pass tests carry the score and
the pass-to-pass tests (weight 0) gate the reward: if any of them fails, the score is 0. The gold is the
original.
"""
from __future__ import annotations

import ast
import json
import random
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

import rlvr.domains.repo.mutate as repo_mutate
from rlvr.domains.code.settings import CODE_PROTECTED_DEFAULT
from rlvr.errors import UserError
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits

HIDDEN_DIR = "hidden_tests"
LIMITS = TaskLimits(max_turns=20, max_tokens=8192, wall_s=600.0, exec_timeout_s=30.0)


class RepoConfig(BaseModel):
    """Settings of the repo domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Order of the tasks: task i is mutant `shuffle(manifest, Random(seed))[i]`."""
    projects: tuple[str, ...] | None = None
    """Only the mutants of these projects (None: every shipped project)."""

    @field_validator("projects")
    @classmethod
    def _known(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        known = repo_mutate.project_names()
        for name in v or ():
            if name not in known:
                raise ValueError(f"unknown project {name!r} (known: {', '.join(known)})")
        return v


@lru_cache(maxsize=1)
def manifest() -> tuple[dict[str, Any], ...]:
    """The verified mutants shipped with rlvr (built by `python -m rlvr.domains.repo.mutate`)."""
    return tuple(json.loads(repo_mutate.MANIFEST.read_text()))


@lru_cache(maxsize=16)
def project_files(name: str) -> dict[str, str]:
    return repo_mutate.read_project(name)


def _description(name: str) -> str:
    init = project_files(name).get(f"{name}/__init__.py", "")
    doc = init.strip().strip('"').strip()
    return doc.splitlines()[0] if doc else f"the {name} package"


def _hidden_id(test_id: str) -> str:
    """`tests/test_x.py::test_y` -> the id of the same test in the hidden copy."""
    return HIDDEN_DIR + test_id[len(repo_mutate.TESTS_DIR):]


def _prompt(entry: dict[str, Any]) -> str:
    project = entry["project"]
    failing = "\n".join(f"  - {t}" for t in entry["fail_to_pass"])
    head = f"You are working in the repository `{project}`: {_description(project)}\n\n"
    tail = ("\n\nDo not edit the tests; every other test must keep passing. "
            f"Run the tests with `python -m pytest -q {repo_mutate.TESTS_DIR}`.\n")
    if entry["operator"] == "stub_function":
        fn = entry["summary"].split()[2]
        return (head + f"The function `{fn}` in `{entry['file']}` has no implementation yet. "
                       f"Implement it as its "
                f"docstring describes. These tests cover it and fail now:\n{failing}" + tail)
    return (head + f"After a recent change these tests fail:\n{failing}\n\nFind the bug in the package "
                   f"and fix it." + tail)


def _claimed_fix(source: str, line: int) -> str:
    """The source with `# fixed` written on the bug's line and nothing else changed (same syntax tree)."""
    lines = source.splitlines(keepends=True)
    at = min(max(line, 1), len(lines)) - 1  # a dropped last statement leaves its line number past the end
    lines[at] = lines[at].rstrip("\n") + "  # fixed\n"
    edited = "".join(lines)
    try:
        if ast.dump(ast.parse(edited)) == ast.dump(ast.parse(source)):
            return edited
    except SyntaxError:  # the line continues with a backslash
        pass
    return source + "\n# fixed\n"


class RepoSource(TaskSource):
    """The verified mutants of the shipped projects, in a seed-determined order."""

    def __init__(self, cfg: RepoConfig | None = None) -> None:
        self.cfg = cfg or RepoConfig()
        self._built: dict[tuple[int, int], Task] = {}
        self.name = "repo"
        self.description = ("Bug-fix and feature tasks in small Python projects (fail-to-pass + "
                            "pass-to-pass tests)")

    @cached_property
    def _entries(self) -> list[dict[str, Any]]:
        entries = [e for e in manifest() if self.cfg.projects is None or e["project"] in self.cfg.projects]
        random.Random(self.cfg.seed).shuffle(entries)
        return entries

    @property
    def size(self) -> int:
        return len(self._entries)

    def _entry(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.size:
            raise UserError(f"repo has tasks 0..{self.size - 1}, not {index}", field="index",
                            fix=f"use repo:0 .. repo:{self.size - 1}")
        return self._entries[index]

    def id_at(self, index: int) -> str:
        e = self._entry(index)
        return f"{e['project']}-{Path(e['file']).stem}-{e['operator']}-{e['site']}"

    def get(self, index: int) -> Task:
        e = self._entry(index)
        key = (self.cfg.seed, index)
        if key not in self._built:  # a mutant is re-derived from the original file: build each task once
            self._built[key] = self._build(e, index)
        return self._built[key]

    def _build(self, e: dict[str, Any], index: int) -> Task:
        files = project_files(e["project"])
        original = files[e["file"]]
        if repo_mutate.sha(original) != e["source_sha"]:
            raise UserError(f"{e['file']} changed since the repo manifest was built",
                            file=repo_mutate.MANIFEST,
                            fix="rebuild it: python -m rlvr.domains.repo.mutate")
        m = repo_mutate.mutant(e["file"], original, e["operator"], e["site"])
        tests_prefix = repo_mutate.TESTS_DIR + "/"
        hidden = {HIDDEN_DIR + "/" + rel[len(tests_prefix):]: text for rel, text in files.items()
                  if rel.startswith(tests_prefix)}
        weights = {**{_hidden_id(t): 0.0 for t in e["pass_to_pass"]},
                   **{_hidden_id(t): 1.0 for t in e["fail_to_pass"]}}
        return Task(
            id=self.id_at(index), domain="repo", prompt=_prompt(e), workspace={**files, e["file"]: m.source},
            hidden=hidden, solution={e["file"]: original},
            verifier={"tests": sorted(hidden), "weights": weights,
                      "gate": sorted(_hidden_id(t) for t in e["pass_to_pass"])},
            protected=CODE_PROTECTED_DEFAULT, limits=LIMITS,
            difficulty=0.6 if e["operator"] == "stub_function" else 0.5,
            source=f"repo:{self.cfg.seed}:{index}", seed=self.cfg.seed, index=index,
            metadata={k: e[k]
                      for k in ("project", "file", "operator", "site", "line", "summary", "fail_to_pass",
                                        "pass_to_pass")})

    def negatives(self, task: Task) -> dict[str, FinalState]:
        return repo_negatives(super().negatives(task), task)


def repo_negatives(base: dict[str, FinalState], task: Task) -> dict[str, FinalState]:
    """Base controls plus: the bug's line marked as fixed without a fix (a wrong answer of the right type),
    the original file copied beside the buggy one (the right answer buried), and the failing tests
    rewritten. Reads the task's metadata `file`, `line` and `fail_to_pass` (workspace test ids)."""
    out = dict(base)
    file = task.metadata["file"]
    buggy = task.workspace[file]
    claimed = _claimed_fix(buggy, int(task.metadata["line"]))
    out["wrong_answer"] = FinalState(files={**task.workspace, file: claimed})
    fixed_copy = str(Path(file).with_name(Path(file).stem + "_fixed.py").as_posix())
    out["buried_answer"] = FinalState(files={**task.workspace, fixed_copy: (task.solution or {})[file]})
    failing_files = {t.split("::")[0] for t in task.metadata["fail_to_pass"]}
    out["tampered_tests"] = FinalState(files={**task.workspace, **{
        f: "def test_ok():\n    assert True\n" for f in failing_files}})
    return out
