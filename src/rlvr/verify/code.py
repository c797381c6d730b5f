"""The code verifier: runs a task's hidden tests with a trusted harness in a fresh sandbox and flags reward hacks.

Settings come from the task's `[verifier]` table (unknown keys are refused, so a typo never weakens a task):

- `tests` (list of paths under hidden/): the hidden pytest files; the loader defaults them to every hidden
  test_*.py. Every test function in them must be collected, run and pass.
- `weights` (table, test id -> weight): relative weights of hidden tests, ids as `file.py::test_name` or
  `file.py::Class::test_name`; unlisted tests weigh 1. Parametrised items share their function's weight.
- `gate` (list of test ids): regression gates (e.g. SWE-style pass-to-pass tests, usually with weight 0): when
  any of them fails, the whole score is 0, so a fix that breaks the rest of the project earns nothing.
- `tests_weight` (float, 1.0): weight of the hidden tests together in the score beside the other checks.
- `allowed_skips`, `allowed_xfails` (lists of test ids): skips / expected failures the task declares; any other
  skip or xfail is a failure.
- `checks` (list of tables): structural soundness, each `{kind, weight = 0.1, required, modules, select,
  max_issues = 10}` with kind `compile` (every Python file compiles; required by default), `import` (the listed
  `modules`, default every top-level code module, import cleanly; required by default), `ruff` (lint with the
  `select`ed rules, partial credit 1 - issues / max_issues) or `types` (mypy, partial credit likewise).
- `cases` (table): randomised hidden cases, `{generator, reference, entry, n = 20, weight = 1.0, tolerance = 1e-9}`:
  `generator` and `reference` are hidden files, `generate(rng)` returns positional args (a list) or keyword args
  (a dict), the reference defines the entry's function; `entry` is the candidate's `module:function`. Each
  verification draws a fresh seed (recorded in the Verdict; `ctx.extras["cases_seed"]` replays one); the
  reference runs without the candidate and outputs never enter the candidate's sandbox.
- `io` (table): fixed hidden cases for one-expression / I/O-style tasks, `{file, entry, weight = 1.0,
  tolerance = 1e-9, partial = true}`: `file` is a hidden file of one Python literal `(args, expected)` a line
  (`args` a tuple of positional arguments), `entry` the candidate's `module:function`. The candidate runs once in
  the sandbox under the lean harness (no pytest): it gets the arguments only, its results come back over the
  signed channel as plain values, and the host compares them with the expected results, which never enter the
  sandbox. Equality is strict: the same types all the way down (a tuple is not a list, True is not 1), floats
  within `tolerance`. The score is the share of cases passed, or with `partial = false` 1 only when all pass.
  `tests` may then be empty; `io` and `cases` exclude each other.
- `needs_change` (bool, true): an unchanged workspace is flagged `no_change`.
- `read_only` (list of globs): workspace files the candidate must not change, beside `Task.protected`.
- `answer_file` (path) and `answer_template` (str, "{answer}"): for single-turn tasks, the answer's first fenced
  Python block (else its raw text) is laid into the template (plain replacement of `{answer}`) and written to
  this workspace path.
- `timeout_s` (float): wall-clock limit of the hidden test run; default the task's `limits.exec_timeout_s`.
- `kind` (str): the verifier kind ("code").

Score: the weighted fraction of hidden tests passed, mixed with cases, io cases and structural checks by weight.
`passed`: every hidden test and case passed, required checks passed, and no integrity flag.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import secrets
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.tasks.spec import Files, FinalState, Task
from rlvr.verify import integrity
from rlvr.verify.answers import apply_template, code_from_answer
from rlvr.verify.base import VerifyContext, register_verifier
from rlvr.verify.harness import CASES, SUPERVISOR, VALUES, WORKER, harness_bytecode, harness_files
from rlvr.verify.harness.checks import run_static_checks
from rlvr.verify.harness.report import RunReport, authenticate, hidden_test_ids, interpret
from rlvr.verify.harness.values import NotPlain, decode, encode, identical, same
from rlvr.verify.verdict import Check, Verdict

CAND, JUDGE = "cand", "judge"


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
    """Fixed hidden (arguments, expected result) pairs, compared on the host after one lean run of the candidate."""

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


class CodeSettings(BaseModel):
    """The `[verifier]` table of a code task (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = "code"
    """Verifier kind."""
    tests: list[str] = Field(default_factory=list)
    """Hidden test files (paths under hidden/)."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Test id -> weight."""
    gate: list[str] = Field(default_factory=list)
    """Test ids that must pass for any credit (regression gates)."""
    tests_weight: float = Field(1.0, ge=0)
    """Weight of the hidden tests together."""
    allowed_skips: list[str] = Field(default_factory=list)
    """Test ids that may be skipped."""
    allowed_xfails: list[str] = Field(default_factory=list)
    """Test ids that may be expected failures."""
    checks: list[StaticCheck] = Field(default_factory=list)
    """Structural soundness checks."""
    cases: CasesSettings | None = None
    """Randomised hidden cases."""
    io: IOSettings | None = None
    """Fixed hidden (arguments, expected result) cases judged without pytest."""
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


def settings_of(task: Task) -> CodeSettings:
    """Validated settings; a bad `[verifier]` table is the task author's error (UserError naming the field)."""
    try:
        s = CodeSettings(**task.verifier)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        fix = "remove it or check its spelling" if err["type"] == "extra_forbidden" else err["msg"]
        raise UserError("invalid code verifier setting", file=task.source, field=f"verifier.{loc}", fix=fix) from None
    for path in [*s.tests, *([s.cases.generator, s.cases.reference] if s.cases else []), *([s.io.file] if s.io else [])]:
        if path not in task.hidden:
            raise UserError(f"{path!r} is not a hidden file", file=task.source, field="verifier",
                            fix="put it under hidden/ or fix the path")
    if not s.tests and s.cases is None and s.io is None:
        raise UserError("a code task needs hidden tests or cases", file=task.source, field="verifier.tests",
                        fix="add hidden/test_*.py")
    if s.cases is not None and s.io is not None:
        raise UserError("`cases` and `io` exclude each other", file=task.source, field="verifier.io",
                        fix="keep one of them")
    return s


def io_expected(task: Task, s: IOSettings) -> dict[str, list[Any]]:
    """The task's fixed io cases, parsed as Python literals (never executed): `{"inputs": [encoded argument
    lists], "outputs": [expected values]}`, the shape the case check compares; a bad file is a UserError."""
    out: dict[str, list[Any]] = {"inputs": [], "outputs": []}
    for lineno, line in enumerate(task.hidden[s.file].splitlines(), 1):
        if not line.strip():
            continue
        try:
            case = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            case = None
        if not (isinstance(case, tuple) and len(case) == 2 and isinstance(case[0], tuple)):
            raise UserError("an io case must be a Python literal `(args_tuple, expected)`", file=task.source,
                            line=lineno, field=f"verifier.io.file ({s.file})", fix="write one case a line")
        args = encode(list(case[0]))
        if args is None or encode(case[1]) is None:
            raise UserError("an io case holds a value that is not plain data", file=task.source, line=lineno,
                            field=f"verifier.io.file ({s.file})", fix="use numbers, strings, lists, tuples, dicts")
        out["inputs"].append(args["v"])
        out["outputs"].append(case[1])
    if not out["inputs"]:
        raise UserError("no io cases", file=task.source, field=f"verifier.io.file ({s.file})",
                        fix="write one `(args, expected)` literal a line")
    return out


def candidate_files(task: Task, final: FinalState, s: CodeSettings) -> Files:
    """The final workspace: the files, or for single-turn tasks the answer laid into the answer file."""
    if s.answer_file is None:
        return dict(final.files)
    files = dict(final.files or task.workspace)
    files[s.answer_file] = apply_template(s.answer_template, code_from_answer(final.answer))
    return files


def read_workspace(path: str | Path) -> Files:
    """A final workspace directory as text files (caches skipped, symlinks left out, bytes decoded leniently)."""
    root = Path(path)
    if not root.is_dir():
        raise UserError("no such workspace directory", file=root, fix="give the final state's directory")
    files: Files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".pytest_cache", ".git"))
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            if not p.is_symlink() and p.is_file():
                files[p.relative_to(root).as_posix()] = p.read_bytes().decode("utf-8", "replace")
    return files


_default_pool: SandboxPool | None = None


def default_pool() -> SandboxPool:
    """The process-wide sandbox pool used when a VerifyContext brings none."""
    global _default_pool
    if _default_pool is None:
        from rlvr.sandbox import make_pool

        _default_pool = make_pool()  # the isolated pool; no bubblewrap is a UserError, never a silent fallback
    return _default_pool


class CodeVerifier:
    """Judges a final workspace with hidden tests, randomised cases, structural checks and integrity flags."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        t0 = time.perf_counter()
        s = settings_of(task)
        files = candidate_files(task, final, s)
        timings: dict[str, float] = {}
        with _quiet_parse():
            found = self._static_flags(task, files, s)
        timings["static"] = time.perf_counter() - t0
        pool = self.ctx.pool or default_pool()
        checks: list[Check] = []
        details: dict[str, Any] = {}
        seed = None
        expected: dict[str, Any] | None = None
        if s.cases is not None:
            seed = int(self.ctx.extras.get("cases_seed", secrets.randbits(32)))
            t1 = time.perf_counter()
            expected, err = self._draw_cases(pool, task, s, seed)
            timings["cases_reference"] = time.perf_counter() - t1
            if err:
                return Verdict.infra(err, seed=seed, timings=timings)
        elif s.io is not None:
            expected = io_expected(task, s.io)
        t1 = time.perf_counter()
        rep, err = self._run_harness(pool, task, files, s, expected)
        timings["sandbox"] = time.perf_counter() - t1
        if err:
            return Verdict.infra(err, seed=seed, timings=timings)
        found.merge(rep.findings)
        if s.tests:
            checks += self._test_checks(task, s, rep, details)
        if expected is not None:
            checks.append(self._cases_check(s, rep, expected))
            _check_case_stream(rep, len(expected["inputs"]))
        if s.checks:
            t1 = time.perf_counter()
            static_checks, err = run_static_checks(pool, s.checks, files, task)
            timings["checks"] = time.perf_counter() - t1
            if err:
                return Verdict.infra(err, seed=seed, timings=timings)
            checks += static_checks
        flags = found.flags()
        required = [c for c in checks if not c.name.startswith("check:") or _required(s, c)]
        passed = bool(required) and all(c.passed for c in required) and not flags
        total = sum(c.weight for c in checks)
        score = sum(c.score * c.weight for c in checks) / total if total > 0 else 0.0
        broken_gates = [c.name for c in checks if c.name in s.gate and not c.passed]
        missing_gates = [g for g in s.gate if g not in {c.name for c in checks}]
        if broken_gates or missing_gates:
            score = 0.0
            passed = False
            details["gates_failed"] = (broken_gates + missing_gates)[:20]
        if rep.payload:
            details["output_tail"] = str(rep.payload.get("output_tail", ""))[-1500:]
        timings["total"] = time.perf_counter() - t0
        return Verdict(score=min(1.0, max(0.0, score)), passed=passed, checks=checks, flags=flags, seed=seed,
                       timings=timings, details=details)

    # ------------------------------------------------------------------------------------- integrity
    def _static_flags(self, task: Task, files: Files, s: CodeSettings) -> integrity.Findings:
        initial = task.workspace
        hidden_tests = {p: task.hidden[p] for p in s.tests}
        found = integrity.tampering(initial, files, (*task.protected, *s.read_only), _shadowable(hidden_tests, initial))
        changed = {p: t for p, t in files.items() if initial.get(p) != t}
        test_names = {n.rsplit("::", 1)[-1] for n in hidden_test_ids(hidden_tests)[0]}
        test_names |= {Path(p).stem for p in hidden_tests} | {Path(p).name for p in hidden_tests}
        own = {p.split("/", 1)[0].removesuffix(".py") for p in files}
        hidden_modules = {p.split("/", 1)[0].removesuffix(".py") for p in task.hidden if p.endswith(".py")} - own
        found.merge(integrity.scan_sources(changed, test_names, hidden_modules))
        visible = {p: t for p, t in initial.items() if p.endswith(".py") and integrity.role_of(p) == "test"}
        found.merge(integrity.hard_coded_cases(changed, visible))
        if s.needs_change:
            found.merge(integrity.no_change(initial, files))
        return found

    # ---------------------------------------------------------------------------------------- harness
    def _run_harness(self, pool: SandboxPool, task: Task, files: Files, s: CodeSettings,
                     expected: dict[str, Any] | None) -> tuple[RunReport, str | None]:
        key = secrets.token_hex(32)
        secret = {s.cases.generator, s.cases.reference} if s.cases else {s.io.file} if s.io else set()
        spec = s.cases or s.io
        judge_files = {p: t for p, t in task.hidden.items() if p not in secret}
        sandbox_files: dict[str, str | bytes] = {f"{CAND}/{p}": t for p, t in files.items()}
        sandbox_files.update({f"{JUDGE}/{p}": t for p, t in judge_files.items()})
        lean = {SUPERVISOR, WORKER, VALUES}  # a run without hidden tests needs no pytest config or case drawer
        sandbox_files.update({f"{JUDGE}/{p}": t for p, t in harness_files().items() if s.tests or p in lean})
        sandbox_files.update({f"{JUDGE}/{p}": b for p, b in harness_bytecode().items()})
        sandbox_files.setdefault(f"{CAND}/.rlvr-keep", "")  # the candidate directory exists even when empty
        timeout = s.timeout_s or task.limits.exec_timeout_s
        hidden_tests = {p: task.hidden[p] for p in s.tests}
        config = {
            "cand": CAND, "judge": JUDGE, "tests": s.tests, "timeout": timeout,
            "pre_import": sorted(_shadowable(hidden_tests, task.workspace)),
            "conftests": sorted(p for p in judge_files if p.rsplit("/", 1)[-1] == "conftest.py"),
            "hidden_modules": sorted({p.split("/", 1)[0].removesuffix(".py") for p in judge_files if p.endswith(".py")}
                                     - {p.split("/", 1)[0].removesuffix(".py") for p in files}),
            "cases": {"entry": spec.entry, "inputs": expected["inputs"]} if spec and expected else None,
        }
        limits = ExecLimits(timeout_s=timeout + 10, memory_mb=max(task.limits.memory_mb, 256), processes=64)
        with pool.lease(sandbox_files) as sb:
            stdin = json.dumps(config) + "\n" + key + "\n"
            res = sb.run(["python", f"{JUDGE}/{SUPERVISOR}"], stdin=stdin, limits=limits,
                         read=[f"{JUDGE}/{p}" for p in judge_files])
        return self._read_result(res, key, judge_files, set(hidden_test_ids(hidden_tests)[1]))

    def _read_result(self, res: ExecResult, key: str, judge_files: Files,
                     unconditional: set[str]) -> tuple[RunReport, str | None]:
        if res.status is ExecStatus.infra_error:
            return RunReport(payload=None), f"sandbox failed: {res.error or res.stderr[-300:]}"
        payload, forged = authenticate(res.stdout, key)
        if payload is None and "Traceback" in res.stderr and SUPERVISOR in res.stderr:
            return RunReport(payload=None), f"harness crashed: {res.stderr.strip().splitlines()[-1][:300]}"
        if payload is not None and not payload.get("messages"):  # the greeting precedes any candidate code
            tail = str(payload.get("output_tail", "")).strip().splitlines()
            return RunReport(payload=None), f"the harness's worker failed to start: {(tail or ['?'])[-1][:300]}"
        rep = interpret(payload, unconditional) if payload is not None else RunReport(payload=None)
        if forged:
            rep.findings.add("report_forgery", None, None, f"{forged} forged result lines on the harness's output")
        if payload is None and res.status not in (ExecStatus.timeout, ExecStatus.memory_limit):
            rep.findings.add("exit_trick", None, None, f"the harness produced no result ({res.status.value})")
        for rel, text in judge_files.items():
            back = res.files.get(f"{JUDGE}/{rel}")
            if back is not None and back != text or back is None and res.files:
                rep.findings.add("tampering", f"hidden/{rel}", None, "hidden test material changed during the run")
        return rep, None

    def _test_checks(self, task: Task, s: CodeSettings, rep: RunReport, details: dict[str, Any]) -> list[Check]:
        ids, _ = hidden_test_ids({p: task.hidden[p] for p in s.tests})
        for extra in s.weights:
            if extra not in ids:
                ids.append(extra)
        total_w = sum(s.weights.get(i, 1.0) for i in ids) or 1.0
        checks = []
        for tid in ids:
            items = [c for c in rep.collected if c == tid or (c.startswith(tid + "[") and c.endswith("]"))]
            good = [i for i in items if _item_passed(i, rep.outcomes.get(i), s)]
            score = len(good) / len(items) if items else 0.0
            detail = "not collected" if not items else next(
                (f"{i}: {rep.outcomes.get(i, 'not run')}: {rep.details.get(i, '')[-400:]}" for i in items
                 if i not in good), "")
            if not items and rep.collect_errors:
                detail = "not collected: " + rep.collect_errors[0][-400:]
            if rep.payload and rep.payload.get("timed_out") and score < 1:
                detail = "timed out; " + detail
            checks.append(Check(name=tid, score=score, weight=s.tests_weight * s.weights.get(tid, 1.0) / total_w,
                                passed=bool(items) and score == 1.0, detail=detail))
        details["collected"] = len(rep.collected)
        return checks

    # ------------------------------------------------------------------------------------------ cases
    def _draw_cases(self, pool: SandboxPool, task: Task, s: CodeSettings,
                    seed: int) -> tuple[dict[str, Any] | None, str | None]:
        assert s.cases is not None
        h = harness_files()
        files = {f"{JUDGE}/{CASES}": h[CASES], f"{JUDGE}/{VALUES}": h[VALUES],
                 f"{JUDGE}/gen.py": task.hidden[s.cases.generator], f"{JUDGE}/ref.py": task.hidden[s.cases.reference]}
        cfg = {"generator": f"{JUDGE}/gen.py", "reference": f"{JUDGE}/ref.py", "seed": seed, "n": s.cases.n,
               "function": s.cases.entry.rsplit(":", 1)[1]}
        limits = ExecLimits(timeout_s=s.timeout_s or task.limits.exec_timeout_s,
                            memory_mb=max(task.limits.memory_mb, 256))
        res = pool.run(["python", f"{JUDGE}/{CASES}"], files=files, stdin=json.dumps(cfg) + "\n", limits=limits)
        if not res.ok:
            return None, f"the task's case generator or reference failed ({res.status.value}): {res.stderr[-300:]}"
        try:
            return json.loads(res.stdout.strip().splitlines()[-1]), None
        except (ValueError, IndexError):
            return None, "the task's case generator printed no cases"

    def _cases_check(self, s: CodeSettings, rep: RunReport, expected: dict[str, Any]) -> Check:
        """Randomised cases (tagged reference outputs, lists and tuples alike) or io cases (literal expected
        values, strict types), compared on the host with what the candidate's run sent back."""
        spec = s.cases or s.io
        assert spec is not None
        good, first_bad = 0, ""
        for i, (inp, out) in enumerate(zip(expected["inputs"], expected["outputs"])):
            msg = rep.cases.get(i)
            ok = False
            if msg and msg.get("out") is not None:
                try:
                    got = decode(msg["out"]["v"])
                    ok = same(got, decode(out), spec.tolerance) if s.cases else identical(got, out, spec.tolerance)
                except (NotPlain, TypeError, KeyError, ValueError):
                    ok = False
            good += ok
            if not ok and not first_bad:
                seen = (msg or {}).get("error") or ("not plain data" if msg else "not run")
                first_bad = f"case {i}: input {json.dumps(inp)[:200]}: {seen if not msg or msg.get('out') is None else 'wrong'}"
        n = len(expected["inputs"])
        detail = rep.cases_error or first_bad
        if rep.payload and rep.payload.get("timed_out") and good < n:
            detail = "timed out; " + detail
        score = good / n if n else 0.0
        if s.io is not None and not s.io.partial:
            score = float(score == 1.0)
        return Check(name=f"{'cases' if s.cases else 'io'}:{spec.entry}", score=score, weight=spec.weight,
                     passed=good == n, detail=detail)


def _check_case_stream(rep: RunReport, n: int) -> None:
    """Every case reported once, in order, before the end of the run (or none after a failed import): anything
    else on the channel was written by someone other than the harness."""
    if any(not 0 <= i < n for i in rep.cases) or rep.duplicate_cases:
        rep.findings.add("report_forgery", None, None, "case results out of range or reported twice")
    elif rep.ended and not rep.cases_error and len(rep.cases) < n:
        rep.findings.add("report_forgery", None, None,
                         f"the run reported its end after {len(rep.cases)} of {n} case results")


_PARSE_LOCK = threading.Lock()


@contextmanager
def _quiet_parse() -> Iterator[None]:
    """Silence the SyntaxWarnings (`1if`, invalid escapes) that parsing candidate code on the host raises: they
    are the candidate's, and would otherwise land in the trainer's output. The lock keeps the process-wide
    warning filters consistent when verifications run in several threads."""
    with _PARSE_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        yield


def _item_passed(item: str, outcome: str | None, s: CodeSettings) -> bool:
    base = item.split("[", 1)[0]
    if outcome == "passed":
        return True
    if outcome == "skipped":
        return item in s.allowed_skips or base in s.allowed_skips
    if outcome == "xfailed":
        return item in s.allowed_xfails or base in s.allowed_xfails
    return False


def _required(s: CodeSettings, c: Check) -> bool:
    kind = c.name.split(":", 2)[1]
    return any(sc.kind == kind and sc.is_required for sc in s.checks)


def _shadowable(hidden_tests: Files, initial: Files) -> set[str]:
    """Top-level modules the hidden tests import from outside the workspace (stdlib or installed)."""
    import ast

    provided = {p.split("/", 1)[0].removesuffix(".py") for p in initial}
    names: set[str] = set()
    for text in hidden_tests.values():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    out = set()
    for name in names - provided:
        if name in sys.stdlib_module_names:
            out.add(name)
            continue
        try:
            if importlib.util.find_spec(name) is not None:
                out.add(name)
        except (ImportError, ValueError):
            continue
    return out


register_verifier("code", CodeVerifier)
