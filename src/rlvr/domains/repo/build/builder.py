"""`rlvr tasks build repo`: a real project turned into verified bug-fix and implementation tasks.

Per project: read its files, make its environment, run its suite twice in the sandbox and keep the tests that
pass both times within `slow_s` (the others in their files are deselected: never run by the verifier), then
screen candidates from the generators in turn, keeping one only when at least one kept test fails and the rest
pass, until `n` are kept. A project that cannot take part (no tests, a C extension, dependencies that do not
install, tests that fail before any change) is skipped with its reason in the report. A src layout's `src/` is
an import root of its tasks (`import_roots`), so the tests and the tools import the workspace's copy.
"""
from __future__ import annotations

import itertools
import json
import random
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from rlvr.atomic import atomic_dir
from rlvr.domains.code.settings import CODE_PROTECTED_DEFAULT
from rlvr.domains.repo.build import generators
from rlvr.domains.repo.build import venv as project_venv
from rlvr.domains.repo.build.prompt import describe
from rlvr.domains.repo.build.runner import SuiteRun, collection_error, run_suite
from rlvr.domains.repo.build.source import Project, metadata_text, package_info, resolve
from rlvr.sandbox import venvs
from rlvr.tasks.spec import Task

if TYPE_CHECKING:
    from rlvr.sandbox.base import SandboxPool

PoolFactory = Callable[[str], AbstractContextManager["SandboxPool"]]
"""Interpreter path -> a sandbox pool running it (a context manager that closes the pool)."""
GoldCheck = Callable[[Task], "set[str] | None"]
"""A probe task (the original tree, every judged file) -> the hidden test ids the verifier that will judge the
tasks fails on the original (None: it passed, flags included). The command line passes the code verifier."""

HIDDEN_DIR = "hidden_tests"
SKIP_DIRS = {".git", ".hg", ".tox", ".nox", "__pycache__", "build", "dist", "docs", "doc", ".github",
             ".venv", "venv", "node_modules", ".eggs", "benchmarks", "examples"}
KEEP_NAMES = {"pyproject.toml", "setup.cfg", "setup.py", "pytest.ini", "tox.ini", "conftest.py", "README",
              "README.md", "README.rst", "LICENSE", "LICENSE.txt"}
TEST_DIRS = {"tests", "test", "testing"}
NATIVE = (".c", ".pyx", ".cpp", ".cc", ".h", ".rs", ".f90")
MAX_FILE = 1_000_000
OLD_PYTEST = "pytest<8"
"""The pytest a suite that cannot start on the latest one is tried on once."""
HARNESS_PYTEST = "pytest>=7"
"""What the verifier's harness runs in (its collector takes pytest 7's `path` arguments)."""
HARNESS_FAILS = "the original does not pass under the verifier's harness"


@dataclass
class ProjectReport:
    """What building one project did."""

    source: str
    name: str = ""
    version: str = ""
    skipped: str = ""
    """Why the project gave no tasks ("" when it took part)."""
    tests_found: int = 0
    tests_kept: int = 0
    flaky: int = 0
    slow: int = 0
    failing: int = 0
    tried: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    env: str = ""
    """Cache key of the project's environment."""
    harness_failing: int = 0
    """Tests that pass under plain pytest but not under the verifier's harness (their files are not
    judged)."""
    skips: list[str] = field(default_factory=list)
    """Tests of the judged files skipped in both runs (the verifier allows their skip)."""
    deselected: list[str] = field(default_factory=list)
    """Tests of the judged files left out of every task (failing, flaky or slow on the original, or failing
    under the verifier's harness): the verifier's `deselect`."""
    roots: list[str] = field(default_factory=list)
    """The project's import roots (`src` of a src layout; [] when its code is at the root)."""
    requirements: list[str] = field(default_factory=list)
    """What the project's environment holds (its tasks' `requirements`)."""
    relaxed: list[str] = field(default_factory=list)
    """The pins relaxed because the environment did not build with them (`"foo==1.0 -> foo"`)."""
    covered_lines: int = 0
    """Lines of the project's sources its kept tests run, where candidates are made (0: the traced run gave
    nothing, so every site was a candidate)."""


@dataclass
class BuildReport:
    """Every project's report and where the tasks went."""

    out: Path
    projects: list[ProjectReport] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def tasks(self) -> int:
        return sum(sum(p.kept.values()) for p in self.projects)

    def to_json(self) -> dict:
        return {"out": str(self.out), "tasks": self.tasks, "seconds": round(self.seconds, 1),
                "projects": [p.__dict__ for p in self.projects]}


def is_test_material(rel: str) -> bool:
    parts = rel.split("/")
    return bool(TEST_DIRS & set(parts[:-1])) or parts[-1] == "conftest.py" or is_test_file(rel)


def is_test_file(rel: str) -> bool:
    """pytest's default test files (`test_*.py`, `*_test.py`), and the single-file suites many projects keep
    (`test.py`, `tests.py`: run by name, since pytest collects any file it is given)."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py") or
                                     name in ("test.py", "tests.py"))


def read_project(root: Path) -> tuple[dict[str, str], list[str]]:
    """The project's text files worth a workspace (sources, tests and their data, packaging config), and the
    native-code files found (a C extension needs a compiler)."""
    files: dict[str, str] = {}
    native: list[str] = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.split("/")[:-1]):
            continue
        if p.is_symlink() or not p.is_file() or p.stat().st_size > MAX_FILE:
            continue
        if p.suffix in NATIVE:
            native.append(rel)
        if not (p.suffix == ".py" or p.name in KEEP_NAMES or is_test_material(rel)):
            continue
        try:
            files[rel] = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return files, native


def dist_metadata(root: Path, roots: list[str]) -> dict[str, str]:
    """The project's distribution metadata as a `NAME-VERSION.dist-info/METADATA` file beside its packages (in
    the import root), so code that asks `importlib.metadata.version(its own name)` at import finds it, as it
    would in an installed project, while the code imported stays the workspace's. From the sdist's PKG-INFO,
    else pyproject's static `[project]` name and version; {} when neither says."""
    info = package_info(root)
    if info is None:
        return {}
    name, version = info
    base = f"{roots[0]}/" if roots else ""
    return {f"{base}{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info/METADATA": metadata_text(root)}


def _skip_reason(files: dict[str, str], native: list[str]) -> str:
    if not any(is_test_file(r) for r in files):
        return "no tests (no test_*.py, *_test.py, test.py or tests.py file)"
    if native:
        return f"needs a C compiler ({native[0]})"
    return ""


def import_roots(files: dict[str, str]) -> list[str]:
    """`["src"]` for a src layout (a package or module under src/), else [] (the code is at the root)."""
    src = any(r.startswith("src/") and r.endswith(".py") and not is_test_material(r) and r.count("/") <= 2
              for r in files)
    return ["src"] if src else []


def build(sources: list[str], out: Path, pool_factory: PoolFactory, n: int = 100, cache: Path | None = None,
          seed: int = 0, domain: str = "repo", slow_s: float = 2.0, show_progress: bool = True,
          max_tries: int | None = None, gold_check: GoldCheck | None = None) -> BuildReport:
    """Build up to `n` tasks per project into the pack directory `out` (an unreadable source raises
    UserError before anything is written)."""
    from rich.console import Console

    from rlvr.progress import Progress

    cache = cache or Path(".rlvr-cache") / "build"
    t0 = time.perf_counter()
    projects = [(s, resolve(s, cache)) for s in sources]  # every source readable before any work
    report = BuildReport(out=out)
    out.mkdir(parents=True, exist_ok=True)
    with Progress(console=Console(stderr=True), disable=not show_progress, transient=True,
                  unit="candidates") as progress:
        for source, project in projects:
            rep = ProjectReport(source, project.name, project.version)
            report.projects.append(rep)
            t1 = time.perf_counter()
            bar = progress.add_task(f"building {project.name}", total=None)
            try:
                _build_project(project, rep, out, pool_factory, n, cache, seed, domain, slow_s,
                               max_tries or 4 * n, lambda done, total, bar=bar: progress.update(
                                   bar, completed=done, total=total), gold_check)
            except venvs.EnvError as exc:
                rep.skipped = str(exc)
            rep.seconds = round(time.perf_counter() - t1, 1)
            progress.remove_task(bar)
    report.seconds = time.perf_counter() - t0
    return report


def _build_project(project: Project, rep: ProjectReport, out: Path, pool_factory: PoolFactory, n: int,
                   cache: Path, seed: int, domain: str, slow_s: float, max_tries: int,
                   tick: Callable[[int, int], None], gold_check: GoldCheck | None = None) -> None:
    files, native = read_project(project.root)
    rep.skipped = _skip_reason(files, native)
    if rep.skipped:
        return
    reqs = project_venv.requirements(project.root)
    test_files = sorted(r for r in files if is_test_file(r))
    rep.roots = roots = import_roots(files)
    files.update(dist_metadata(project.root, roots))
    with ExitStack() as stack:
        pool, reqs, first = _environment(stack, pool_factory, reqs, files, test_files, rep)
        verified, kept_ids = _verified(pool, files, test_files, first, rep, slow_s, domain, gold_check, reqs)
        pins = harness_pins(reqs) if rep.skipped == HARNESS_FAILS else []
        if pins:
            # a pin is honoured where the harness runs on it; this one it does not: relaxed, and recorded in
            # every task's metadata
            stack.close()
            rep.skipped, rep.harness_failing = "", 0
            relaxed = [f"{r} -> {project_venv.relax(r)} (the verifier's harness needs {HARNESS_PYTEST})"
                       for r in pins]
            pool, reqs, first = _environment(stack, pool_factory,
                                             [project_venv.relax(r) if r in pins else r for r in reqs], files,
                                             test_files, rep)
            rep.relaxed = relaxed + rep.relaxed
            verified, kept_ids = _verified(pool, files, test_files, first, rep, slow_s, domain, gold_check,
                                           reqs)
        if not verified:
            rep.skipped = rep.skipped or _failing_reason(first, rep)
            return
        budget = max(30.0, 3 * sum(first.durations.get(t, 0.0) for t in kept_ids) + 15)
        sources = {r: t for r, t in files.items() if r.endswith(".py") and not is_test_material(r)
                   and r.rsplit("/", 1)[-1] not in ("setup.py", "conftest.py")}
        # the lines the kept tests run: breaks elsewhere (scripts, data tables, dead code) cannot be noticed
        traced = run_suite(pool, files, verified, timeout_s=600.0, roots=roots, trace=True)
        covered = {r: lines for r, lines in (traced.covered or {}).items() if r in sources} or None
        imported = {r: lines for r, lines in (traced.imported or {}).items() if r in sources}
        rep.covered_lines = sum(len(lines) for lines in (covered or {}).values())
        streams = _streams(project, sources, seed, covered, imported)
        kept = 0
        with ThreadPoolExecutor(2) as workers:
            batch_iter = _batches(streams, 4)
            for batch in batch_iter:
                runs = list(workers.map(lambda c: run_suite(pool, {**files, **c.changes}, verified, budget,
                                                            roots=roots), batch))
                for cand, run in zip(batch, runs):
                    if kept >= n:  # the rest of the last batch is neither tried nor kept in the report
                        break
                    rep.tried[cand.generator] = rep.tried.get(cand.generator, 0) + 1
                    f2p = _fail_to_pass(run, kept_ids)
                    if f2p:
                        write_task(out, project, files, cand, verified, f2p, kept_ids, run, domain, rep, reqs)
                        rep.kept[cand.generator] = rep.kept.get(cand.generator, 0) + 1
                        kept += 1
                tick(kept, n)
                if kept >= n or sum(rep.tried.values()) >= max_tries:
                    break


def _environment(stack: ExitStack, pool_factory: PoolFactory, reqs: list[str], files: dict[str, str],
                 test_files: list[str], rep: ProjectReport) -> tuple[SandboxPool, list[str], SuiteRun]:
    """The project's venv (in the cache every later run, the tasks' own requirements, finds it in), a pool on
    it entered on `stack`, and the suite's first run there; on the last pytest before 8 when the suite cannot
    start on today's (typically a conftest still using hook arguments pytest 8 removed, such as `path`)."""
    made = project_venv.make_venv(reqs, venvs.env_cache())
    reqs, rep.relaxed = made.requirements, made.relaxed
    pool = stack.enter_context(pool_factory(str(made.python)))
    first = run_suite(pool, files, test_files, timeout_s=600.0, roots=rep.roots)
    if not first.outcomes and not first.collect_errors and "pytest" in reqs:
        stack.close()
        made = project_venv.make_venv(sorted(OLD_PYTEST if r == "pytest" else r for r in reqs),
                                      venvs.env_cache())
        reqs, rep.relaxed = made.requirements, rep.relaxed + made.relaxed
        pool = stack.enter_context(pool_factory(str(made.python)))
        first = run_suite(pool, files, test_files, timeout_s=600.0, roots=rep.roots)
    rep.env, rep.requirements = venvs.env_key(reqs), reqs
    return pool, reqs, first


def _verified(pool: SandboxPool, files: dict[str, str], test_files: list[str], first: SuiteRun,
              rep: ProjectReport, slow_s: float, domain: str, gold_check: GoldCheck | None,
              reqs: list[str]) -> tuple[list[str], set[str]]:
    """The suite's second run, then the files and tests kept: stable in time, and passing under the
    verifier's harness."""
    second = run_suite(pool, files, test_files, timeout_s=600.0, roots=rep.roots)
    verified, kept_ids = _stable(first, second, rep, slow_s)
    if verified and gold_check is not None:
        verified, kept_ids = _judged_by_verifier(files, verified, kept_ids, rep, domain, gold_check, reqs)
    return verified, kept_ids


def harness_pins(reqs: list[str]) -> list[str]:
    """The requirements that pin the test runner the verifier's harness runs in (pytest) to an old version,
    where their markers apply: what a project whose original fails only under the harness gets relaxed."""
    out = []
    for r in reqs:
        try:
            req = Requirement(r)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "pytest" and project_venv.pinned(r) and \
                (req.marker is None or req.marker.evaluate()):
            out.append(r)
    return out


def _stable(first: SuiteRun, second: SuiteRun, rep: ProjectReport, slow_s: float) -> tuple[list[str],
                                                                                           set[str]]:
    """(test files every test of which passed both runs in time, the kept test ids in them)."""
    ids = set(first.outcomes) | set(second.outcomes)
    rep.tests_found = len(ids)
    passed = {t for t in ids if first.outcomes.get(t) == second.outcomes.get(t) == "passed"}
    flaky = {t for t in ids if first.outcomes.get(t) != second.outcomes.get(t)}
    slow = {t for t in passed if max(first.durations.get(t, 0.0), second.durations.get(t, 0.0)) > slow_s}
    keep = passed - slow
    skipped = {t for t in ids if first.outcomes.get(t) == second.outcomes.get(t) == "skipped"}
    rep.flaky, rep.slow, rep.failing = len(flaky), len(slow), len(ids - passed - flaky - skipped)
    rep.tests_kept = len(keep)
    if first.status == "timeout" or len(keep) < max(1, (len(ids) - len(skipped)) // 2):
        return [], set()
    by_file: dict[str, set[str]] = {}
    for t in ids:
        by_file.setdefault(t.split("::", 1)[0], set()).add(t)
    broken = {e.split("::", 1)[0] for e in first.collect_errors + second.collect_errors}
    verified = sorted(f for f, ts in by_file.items() if ts & keep and f not in broken)
    rep.skips = sorted(t for t in skipped if t.split("::", 1)[0] in verified)
    rep.deselected = sorted(t for t in ids - keep - skipped if t.split("::", 1)[0] in verified)
    return verified, {t for t in keep if t.split("::", 1)[0] in verified}


def _failing_reason(first: SuiteRun, rep: ProjectReport) -> str:
    """Why the tests fail before any change; when collection failed (a module the tests import is missing,
    say), with the last line of its error."""
    reason = (f"tests fail before any change ({rep.tests_kept} of {rep.tests_found} tests pass both "
              f"runs in time)")
    why = collection_error(first) if first.collect_errors or not first.outcomes else ""
    return f"{reason}: {why}" if why else reason


def _judged_by_verifier(files: dict[str, str], verified: list[str], kept_ids: set[str], rep: ProjectReport,
                        domain: str, gold_check: GoldCheck, reqs: list[str]) -> tuple[list[str], set[str]]:
    """Leave out what the verifier's harness fails on the original, each file judged alone (one flagged test
    can end a run): the tests that fail under it are deselected and the file judged again; a file that still
    fails (a test the harness treats as a reward hack, an assert it cannot run unrewritten) is left out. Then
    the original is checked once more with the rest together; ([], set()) when it still fails."""
    def probe(tests: list[str]) -> Task:
        return Task(id="probe", domain=domain, prompt="probe", workspace=files,
                    hidden={_hidden(r): t for r, t in files.items() if is_test_material(r)},
                    verifier={"tests": [_hidden(f) for f in tests], "timeout_s": 120, "needs_change": False,
                              "allowed_skips": [_hidden(t) for t in rep.skips], "import_roots": rep.roots,
                              "deselect": [_hidden(t) for t in rep.deselected]},
                    protected=CODE_PROTECTED_DEFAULT, requirements=tuple(reqs))
    good = []
    for f in verified:
        mine = {t for t in kept_ids if t.split("::", 1)[0] == f}
        failing = gold_check(probe([f]))
        fails = {n.removeprefix(f"{HIDDEN_DIR}/") for n in failing or ()} & mine
        if fails and fails != mine:
            before = rep.deselected
            rep.deselected = sorted({*before, *fails})
            failing = gold_check(probe([f]))
            if failing is None:
                rep.harness_failing += len(fails)
                kept_ids = kept_ids - fails
            else:
                rep.deselected = before
        if failing is None:
            good.append(f)
        else:
            rep.harness_failing += len(mine)
    if good and gold_check(probe(good)) is None:
        rep.deselected = [t for t in rep.deselected if t.split("::", 1)[0] in good]
        return good, {t for t in kept_ids if t.split("::", 1)[0] in good}
    rep.skipped = HARNESS_FAILS
    return [], set()


def _fail_to_pass(run: SuiteRun, kept_ids: set[str]) -> list[str]:
    """The kept tests the candidate breaks ([] when it hung, or the tests cannot tell it from the
    original)."""
    if run.status == "timeout" or not run.outcomes and not run.collect_errors:
        return []
    return sorted(t for t in kept_ids if run.outcomes.get(t) != "passed")


def _streams(project: Project, sources: dict[str, str], seed: int, covered: generators.Covered | None = None,
             imported: generators.Covered | None = None) -> list[Iterator[generators.Candidate]]:
    rng = random.Random(f"{project.name}-{seed}")
    return [generators.mutations(sources, random.Random(rng.random()), covered, imported),
            generators.implementations(sources, random.Random(rng.random()), covered),
            generators.reverts(project.root, sources) if project.git else iter(())]


def _batches(streams: list[Iterator[generators.Candidate]],
             size: int) -> Iterator[list[generators.Candidate]]:
    """Round-robin over the generators, `size` candidates at a time."""
    def rr() -> Iterator[generators.Candidate]:
        live = list(streams)
        while live:
            for s in list(live):
                c = next(s, None)
                if c is None:
                    live.remove(s)
                else:
                    yield c
    it = rr()
    while batch := list(itertools.islice(it, size)):
        yield batch


def _hidden(rel: str) -> str:
    return f"{HIDDEN_DIR}/{rel}"


def task_id(project: Project, cand: generators.Candidate) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{project.name}-{project.version}-{cand.key}")


def write_task(out: Path, project: Project, files: dict[str, str], cand: generators.Candidate,
               verified: list[str], f2p: list[str], kept_ids: set[str], run: SuiteRun, domain: str,
               rep: ProjectReport, reqs: list[str]) -> Path:
    """One task directory, written under a temporary name and renamed (never half-written)."""
    tid = task_id(project, cand)
    p2p = sorted(kept_ids - set(f2p))
    weights = {**{_hidden(t): 0.0 for t in p2p}, **{_hidden(t): 1.0 for t in f2p}}
    meta = {"project": project.name, "version": project.version, "generator": cand.generator,
            "file": cand.file,
            "line": cand.line, "operator": cand.operator, "site": cand.site, "commit": cand.commit,
            "summary": cand.summary, "fail_to_pass": f2p, "env": rep.env, "requirements": reqs,
            "relaxed": rep.relaxed}
    toml = [f"id = {json.dumps(tid)}", f"domain = {json.dumps(domain)}",
            f"difficulty = {0.6 if cand.generator == 'implement' else 0.5}",
            f"protected = {json.dumps(list(CODE_PROTECTED_DEFAULT))}", f"requirements = {json.dumps(reqs)}",
            "", "[verifier]",
            f"tests = {json.dumps([_hidden(f) for f in verified])}",
            f"gate = {json.dumps([_hidden(t) for t in p2p])}",
            f"allowed_skips = {json.dumps([_hidden(t) for t in rep.skips])}",
            f"deselect = {json.dumps([_hidden(t) for t in rep.deselected])}", "timeout_s = 120",
            f"visible_tests = {json.dumps(verified)}",
            *([f"import_roots = {json.dumps(rep.roots)}"] if rep.roots else []),
            "", "[verifier.weights]", *(f"{json.dumps(k)} = {v}" for k, v in weights.items()),
            "", "[limits]", "max_turns = 20", "max_tokens = 8192", "wall_s = 900", "exec_timeout_s = 120", "",
            "[metadata]", *(f"{k} = {json.dumps(v)}" for k, v in meta.items())]
    layout = {"workspace": {**files, **cand.changes},
              "hidden": {_hidden(r): t for r, t in files.items() if is_test_material(r)},
              "solution": {r: files[r] for r in cand.changes}}
    with atomic_dir(out / tid, replace=True) as tmp:
        for part, tree in layout.items():
            for rel, text in tree.items():
                dest = tmp / part / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text, encoding="utf-8")
        (tmp / "task.toml").write_text("\n".join(toml) + "\n", encoding="utf-8")
        (tmp / "prompt.md").write_text(describe(project.name, cand, f2p, run.errors, verified),
                                       encoding="utf-8")
    return out / tid
