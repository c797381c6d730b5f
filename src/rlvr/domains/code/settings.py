"""The settings of the code verifier: the `[verifier]` table of a code task, validated when the task loads.

Unknown keys are refused (with "did you mean"), so a typo never weakens a task:


- `tests` (list of paths under hidden/): the hidden pytest files; the loader defaults them to every hidden
  test_*.py. Every test function in them must be collected, run and pass.
- `weights` (table, test id -> weight): relative weights of hidden tests, ids as `file.py::test_name` or
  `file.py::Class::test_name`; unlisted tests weigh 1. Parametrised items share their function's weight.
- `gate` (list of test ids): regression gates (e.g. SWE-style pass-to-pass tests, usually with weight 0): when
  any of them fails, the whole score is 0, so a fix that breaks the rest of the project earns nothing.
- `tests_weight` (float, 1.0): weight of the hidden tests together in the score beside the other checks.
- `allowed_skips`, `allowed_xfails` (lists of test ids): skips / expected failures the task declares; any
  other skip or xfail is a failure.
- `deselect` (list of test ids `file.py::[Class::]name`): tests of the hidden files left out of the run, every
  parametrisation with them (e.g. a real project's tests that need a module or the network this sandbox
  lacks); they are neither collected nor judged.
- `checks` (list of tables): structural soundness, each `{kind, weight = 0.1, required, modules, select,
  max_issues = 10}` with kind `compile` (every Python file compiles; required by default), `import` (the
  listed `modules`, default every top-level code module, import cleanly; required by default), `ruff` (lint
  with the `select`ed rules, partial credit 1 - issues / max_issues) or `types` (mypy, partial credit
  likewise).
- `cases` (table): randomised hidden cases, `{generator, reference, entry, n = 20, weight = 1.0, tolerance =
  1e-9}`: `generator` and `reference` are hidden files, `generate(rng)` returns positional args (a list) or
  keyword args (a dict), the reference defines the entry's function; `entry` is the candidate's
  `module:function`. The cases are drawn from a seed derived from the verification seed (`VerifyContext.seed`)
  and the task key, so the same seed draws the same cases and `rlvr verify --seed N` replays a verdict
  (`Verdict.seed`); the reference runs without the candidate and outputs never enter the candidate's sandbox.
- `io` (table): fixed hidden cases for one-expression / I/O-style tasks, `{file, entry, weight = 1.0,
  tolerance = 1e-9, partial = true}`: `file` is a hidden file of one Python literal `(args, expected)` a line
  (`args` a tuple of positional arguments), `entry` the candidate's `module:function`. The candidate runs once
  in the sandbox under the lean harness (no pytest): it gets the arguments only, its results come back over
  the signed channel as plain values, and the host compares them with the expected results, which never enter
  the sandbox. Equality is strict: the same types all the way down (a tuple is not a list, True is not 1),
  floats within `tolerance`. The score is the share of cases passed, or with `partial = false` 1 only when all
  pass. `tests` may then be empty; `io` and `cases` exclude each other.
- `fresh` (table): the differential check, `{n = 8, weight = 1.0}`: where the task has a reference solution
  (`solution/`, or the gold answer of a single-turn task) and example inputs (the `io` cases, or literal calls
  of a function the tests import), `n` fresh inputs shaped like the examples are taken by the verification
  seed from the task's pool of `4 n` (drawn from the task's key) and the candidate's results compared with the
  reference's on the host (check `fresh:<entry>`, lists and tuples alike, strict types under `io`); the score
  is then scaled by `1 - weight * (1 - share right)`, so fresh inputs never add credit (a negative control
  still scores 0). A task with `cases` draws there instead. `n = 0` turns it off (for tasks whose answers are
  not unique). It also runs the literal keys of the candidate's constant branches through both (hard-coding).
- `time_limits` (table, test id -> seconds): speed requirements, measured by the harness's supervisor (another
  process, from the arrival of the worker's messages), never by a clock the candidate can reach: a test whose
  call phase took longer fails.
- `visible_tests` (list of workspace paths): the workspace's own tests, which the `run_tests` tool runs for
  the model (default every test_*.py / *_test.py in the workspace); they guide, the hidden tests judge.
- `visible_io` (workspace path): for an attempts task (`attempts = true`, answered over several turns), a
  file of visible io cases written like `io`'s, run on each answer with `io`'s entry (needs `io`); the env
  says back the ones it failed (call, expected, got; `rlvr.domains.code.feedback`). They guide; the hidden
  cases judge.
- `import_roots` (list of workspace directories): where the candidate's code is imported from besides the
  workspace's root, e.g. `["src"]` for a project with a src layout. The hidden tests import from them, and so
  do the commands of the task's tools (`run_tests`, `run`, `bash`: `PYTHONPATH` names them).
- `needs_change` (bool, true): an unchanged workspace is flagged `no_change`.
- `read_only` (list of globs): workspace files the candidate must not change, beside `Task.protected`.
- `answer_file` (path) and `answer_template` (str, "{answer}"): for single-turn tasks, the answer's first
  fenced Python block (else its raw text) is laid into the template (plain replacement of `{answer}`) and
  written to this workspace path.
- `timeout_s` (float): wall-clock limit of the hidden test run; default the task's `limits.exec_timeout_s`.
- `kind` (str): the verifier kind ("code").
"""
from __future__ import annotations

import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.errors import UserError
from rlvr.tasks.spec import Task
from rlvr.verify.base import VerifierSettings


class StaticCheck(BaseModel):
    """One structural check of the candidate's code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["compile", "import", "ruff", "types"]
    """Which tool judges: compile, import, ruff or types (mypy)."""
    weight: float = Field(0.1, ge=0)
    """Weight in the score beside the hidden tests (tests_weight)."""
    required: bool | None = None
    """Whether `passed` needs it; default true for compile and import, false for lint and types."""
    modules: list[str] = Field(default_factory=list)
    """Modules the import check imports (default: every top-level code module)."""
    select: list[str] = Field(default_factory=list)
    """Ruff rule selection (default ruff's own)."""
    max_issues: int = Field(10, ge=1)
    """Issues at which a lint or type check scores 0."""

    @property
    def is_required(self) -> bool:
        return self.required if self.required is not None else self.kind in ("compile", "import")


class CasesSettings(BaseModel):
    """Randomised hidden cases compared with a reference outside the candidate's reach."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    generator: str
    """Hidden file defining `generate(rng) -> list | dict` (positional or keyword arguments)."""
    reference: str
    """Hidden file defining the reference function (named like the entry's function)."""
    entry: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """The candidate's `module:function`."""
    n: int = Field(20, ge=1, le=10000)
    """Cases drawn per verification."""
    weight: float = Field(1.0, ge=0)
    """Weight of all cases together."""
    tolerance: float = Field(1e-9, ge=0)
    """Relative and absolute tolerance for floats."""


class IOSettings(BaseModel):
    """Fixed hidden (arguments, expected result) pairs, compared on the host after one lean run of the
    candidate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    file: str
    """Hidden file of one Python literal `(args, expected)` a line, `args` a tuple of positional arguments."""
    entry: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """The candidate's `module:function`."""
    weight: float = Field(1.0, ge=0)
    """Weight of all io cases together."""
    tolerance: float = Field(1e-9, ge=0)
    """Relative and absolute tolerance for floats."""
    partial: bool = True
    """Score the share of cases passed (true), or 1 only when every case passes (false: for answers, like one
    expression, where agreeing with the expected results on some inputs is coincidence, not progress)."""


class FreshSettings(BaseModel):
    """The differential check on fresh inputs (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(8, ge=0, le=1000)
    """Fresh inputs judged per verification, taken by the verification seed from the task's pool of `4 * n`
    (0: off)."""
    weight: float = Field(1.0, ge=0, le=1)
    """How much of the score depends on them: the score is scaled by `1 - weight * (1 - share right)`."""


class CodeSettings(VerifierSettings):
    """The `[verifier]` table of a code task (see the module docstring)."""

    tests: list[str] = Field(default_factory=list)
    """Hidden test files (paths under hidden/)."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Test id -> weight. A weighted test counts whole: its share is earned when every one of its
    parametrized cases passes (a fail-to-pass test whose other cases pass on the broken code earns nothing);
    a test not named here earns the share of its cases that pass."""
    gate: list[str] = Field(default_factory=list)
    """Test ids that must pass for any credit (regression gates)."""
    tests_weight: float = Field(1.0, ge=0)
    """Weight of the hidden tests together."""
    allowed_skips: list[str] = Field(default_factory=list)
    """Test ids that may be skipped: a skipped one weighs nothing (it proves nothing of the candidate's)."""
    allowed_xfails: list[str] = Field(default_factory=list)
    """Test ids that may be expected failures: an expected failure weighs nothing, as an allowed skip."""
    deselect: list[str] = Field(default_factory=list)
    """Test ids (function level) of the hidden files that are not run."""
    checks: list[StaticCheck] = Field(default_factory=list)
    """Structural soundness checks."""
    cases: CasesSettings | None = None
    """Randomised hidden cases."""
    io: IOSettings | None = None
    """Fixed hidden (arguments, expected result) cases judged without pytest."""
    fresh: FreshSettings = Field(default_factory=FreshSettings)
    """The differential check against the reference on fresh inputs."""
    time_limits: dict[str, float] = Field(default_factory=dict)
    """Test id -> most seconds its call phase may take, timed by the harness."""
    visible_tests: list[str] = Field(default_factory=list)
    """Workspace tests the `run_tests` tool runs (default every test_*.py / *_test.py in the workspace)."""
    visible_io: str | None = None
    """Workspace file of visible io cases an attempts task's answers are checked on (needs `io`)."""
    import_roots: list[str] = Field(default_factory=list)
    """Workspace directories the candidate's code is imported from besides the root (`src` for a src
    layout)."""
    needs_change: bool = True
    """Flag an unchanged workspace."""
    read_only: list[str] = Field(default_factory=list)
    """Extra protected globs."""
    answer_file: str | None = None
    """Workspace path the single-turn answer is written to."""
    answer_template: str = "{answer}"
    """Template with one `{answer}` placeholder."""
    timeout_s: float | None = Field(None, gt=0)
    """Limit of the hidden test run (default the task's exec_timeout_s)."""

    def importable(self, path: str) -> str:
        """A workspace path as the import system sees it: relative to the import root it lies under
        (`src/pkg/mod.py` -> `pkg/mod.py` with `import_roots = ["src"]`), else unchanged."""
        for root in self.import_roots:
            prefix = root.strip("/") + "/"
            if path.startswith(prefix):
                return path[len(prefix):]
        return path

    def workspace_tests(self) -> list[str] | None:
        """The declared `visible_tests`, which the env's `run_tests` tool runs (None: the default files)."""
        return list(self.visible_tests) or None

    def check(self, task: Task) -> None:
        """The files the settings name exist, and the task has something to judge it by."""
        named = [*self.tests, *([self.cases.generator, self.cases.reference] if self.cases else []),
                 *([self.io.file] if self.io else [])]
        where = task.source or task.key
        for path in named:
            if path not in task.hidden:
                raise UserError(f"{path!r} is not a hidden file", file=where, field="verifier",
                                fix="put it under hidden/ or fix the path")
        for path in self.visible_tests:
            name = path.split("::", 1)[0].rstrip("/")
            if name not in task.workspace and not any(p.startswith(name + "/") for p in task.workspace):
                raise UserError(f"{path!r} is not in the workspace", file=where,
                                field="verifier.visible_tests",
                                fix="put it under workspace/ or fix the path")
        if self.visible_io is not None and (self.io is None or self.visible_io not in task.workspace):
            raise UserError(f"visible_io {self.visible_io!r} needs io cases and a workspace file", file=where,
                            field="verifier.visible_io",
                            fix="put the file under workspace/ and set [verifier.io] with its entry")
        for root in self.import_roots:
            parts = root.strip("/").split("/")
            if root.startswith("/") or not root.strip("/") or any(p in ("", ".", "..") for p in parts):
                raise UserError(f"{root!r} is not a workspace directory", file=where,
                                field="verifier.import_roots",
                                fix="name a directory relative to the workspace, such as \"src\"")
        both = sorted(set(self.deselect) & {*self.gate, *self.weights})
        if both:
            raise UserError(f"{both[0]!r} is deselected but also weighted or a gate", file=where,
                            field="verifier.deselect", fix="drop it from one of them")
        if not self.tests and self.cases is None and self.io is None:
            raise UserError("a code task needs hidden tests or cases", file=where, field="verifier.tests",
                            fix="add hidden/test_*.py")
        if self.cases is not None and self.io is not None:
            raise UserError("`cases` and `io` exclude each other", file=where, field="verifier.io",
                            fix="keep one of them")


CODE_PROTECTED_DEFAULT: tuple[str, ...] = (
    "test_*.py", "*/test_*.py", "*_test.py", "*/*_test.py", "test.py", "*/test.py", "tests.py", "*/tests.py",
    "tests/*", "conftest.py", "*/conftest.py",
    "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "*.pth", "sitecustomize.py", "usercustomize.py",
)
"""Workspace files of a code task that the candidate must not change unless the task says otherwise."""


def task_defaults(fields: dict[str, Any], file: Path) -> None:
    """A bare code task directory: hidden tests default to every test_*.py under hidden/, workspace tests are
    protected (the `Domain.task_defaults` of the code domain)."""
    verifier = fields.setdefault("verifier", {})
    if not isinstance(verifier, dict):
        raise UserError("must be a table", file=file, field="verifier", fix="write [verifier]")
    if "tests" not in verifier:
        verifier["tests"] = sorted(p for p in fields.get("hidden", {})
                                   if fnmatch.fnmatch(PurePosixPath(p).name, "test_*.py"))
    declared = tuple(fields.get("protected", ()))
    fields["protected"] = tuple(dict.fromkeys(CODE_PROTECTED_DEFAULT + declared))

