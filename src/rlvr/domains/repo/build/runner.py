"""Running a project's tests in the sandbox: per-test outcomes and durations from a small pytest plugin.

Tests run the way the code verifier's harness runs hidden tests: the project's own pytest configuration is
replaced by an empty one (its `addopts` would otherwise add doctests, coverage or plugins the harness never
runs), asserts are not rewritten, and the project's conftest files are loaded.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.sandbox.base import SandboxPool

PLUGIN_MODULE = "_rlvr_build_probe"
RESULTS = ".rlvr-build-results.json"
INI = ".rlvr-build-pytest.ini"
_PARAMS = re.compile(r"\[.*\]$")
_EXC_NAME = re.compile(r"[A-Za-z_]\w*(Error|Exception|Exit|Interrupt|Warning)")
PLUGIN = f'''"""Records every test's outcome, duration and exception type for the task builder."""
import json

_R = {{}}


def _merge(nodeid, outcome, duration, exc=""):
    r = _R.setdefault(nodeid, {{"outcome": "passed", "duration": 0.0, "exc": ""}})
    r["duration"] += duration
    rank = {{"passed": 0, "skipped": 1, "failed": 2}}
    if rank[outcome] > rank[r["outcome"]]:
        r["outcome"], r["exc"] = outcome, exc


def pytest_runtest_logreport(report):
    exc = ""
    if report.failed and getattr(report, "longrepr", None) is not None:
        crash = getattr(report.longrepr, "reprcrash", None)
        exc = (getattr(crash, "message", "") or "").split(":", 1)[0].split("\\n", 1)[0][:80]
    _merge(report.nodeid, "failed" if report.failed else "skipped" if report.skipped else "passed",
           report.duration, exc)


def pytest_collectreport(report):
    if report.failed:
        _merge("<collect>" + report.nodeid, "failed", 0.0, "collection error")
        lines = [ln.strip() for ln in str(getattr(report, "longrepr", "") or "").splitlines() if ln.strip()]
        _R["<collect>" + report.nodeid]["msg"] = (lines[-1] if lines else "")[:300]


def pytest_sessionfinish(session):
    with open({RESULTS!r}, "w") as f:
        json.dump(_R, f)
'''

TRACE_MODULE = "_rlvr_build_lines"
LINES = ".rlvr-build-lines.json"
TRACE = f'''"""Records the lines of the project's own files that run while its suite runs (for the task
builder): those run by the tests, and apart from them those run only while the test modules were imported (a
module's top level, a data table)."""
import json
import os
import sys
import threading

_ROOT = os.getcwd() + os.sep
_LINES = {{"import": {{}}, "tests": {{}}}}
_PHASE = ["import"]


def _global(frame, event, arg):
    name = frame.f_code.co_filename
    if not name.startswith(_ROOT):
        if name.startswith(("/", "<")):
            return None
        name = os.path.abspath(name)
        if not name.startswith(_ROOT):
            return None
    seen = _LINES[_PHASE[0]].setdefault(name[len(_ROOT):], set())
    seen.add(frame.f_lineno)

    def local(frame, event, arg):
        if event == "line":
            seen.add(frame.f_lineno)
        return local
    return local


sys.settrace(_global)
threading.settrace(_global)


def pytest_collection_finish(session):
    _PHASE[0] = "tests"


def pytest_sessionfinish(session):
    sys.settrace(None)
    with open({LINES!r}, "w") as f:
        json.dump({{phase: {{k: sorted(v) for k, v in files.items()}} for phase, files in _LINES.items()}}, f)
'''


@dataclass(frozen=True)
class SuiteRun:
    """What one run of the suite did."""

    outcomes: dict[str, str]
    """Function-level test id (`path::[Class::]name`, parameters folded) -> passed / failed / skipped."""
    durations: dict[str, float]
    """Function-level test id -> seconds (all its parameters together)."""
    errors: dict[str, str]
    """Function-level test id -> the exception type it failed with."""
    collect_errors: list[str]
    """Nodes that failed to collect."""
    status: str
    """The sandbox's status of the run (`ok`, `exit_nonzero`, `timeout`, ...)."""
    tail: str
    """The end of pytest's output (for the build report)."""
    covered: dict[str, set[int]] | None = None
    """Workspace file -> the lines of it the tests ran (a traced run only; None otherwise)."""
    imported: dict[str, set[int]] | None = None
    """Workspace file -> the lines of it that ran only while the test modules were imported (a traced run)."""
    collect_message: str = ""
    """The last line of the first collection error pytest reported ("" when none did)."""


def function_id(nodeid: str) -> str:
    """`tests/test_a.py::TestX::test_y[3]` -> `tests/test_a.py::TestX::test_y`."""
    return _PARAMS.sub("", nodeid)


def argv(test_files: Sequence[str], trace: bool = False) -> list[str]:
    """The sandboxed test command (`trace`: with the line recorder loaded before anything else)."""
    return ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
            *(["-p", TRACE_MODULE] if trace else []),
            "-p", PLUGIN_MODULE, "-p", "no:randomly", "--assert=plain", "-c", INI, "--rootdir", ".",
            *test_files]


def run_suite(pool: SandboxPool, files: dict[str, str], test_files: Sequence[str], timeout_s: float,
              memory_mb: int = 1024, roots: Sequence[str] = (), trace: bool = False) -> SuiteRun:
    """Run `test_files` on a fresh copy of `files` in the sandbox, the workspace's import `roots` (`src` of a
    src layout) on sys.path as the verifier puts them; with `trace`, also record which lines of the
    workspace's files the tests ran (`SuiteRun.covered`) and which ran only at import (`SuiteRun.imported`):
    slower, so never the timed runs."""
    ini = "[pytest]\n" + (f"pythonpath = {' '.join(roots)}\n" if roots else "")
    staged = {**files, f"{PLUGIN_MODULE}.py": PLUGIN, INI: ini,
              **({f"{TRACE_MODULE}.py": TRACE} if trace else {})}
    # partial limits as a mapping (`rlvr.sandbox.limits.Layer`): merged over the pool's defaults per field
    limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "processes": 64, "output_bytes": 200_000}
    res = pool.run(argv(test_files, trace), files=staged, limits=limits,  # type: ignore[arg-type]
                   read=[RESULTS, *([LINES] if trace else [])])
    run = parse(res.files.get(RESULTS), res.status.value, (res.stdout + res.stderr)[-2000:])
    if not trace:
        return run
    try:
        lines = json.loads(res.files.get(LINES) or "null")
    except ValueError:
        lines = None
    if not isinstance(lines, dict):
        return run
    tests, imported = ({str(k): {int(n) for n in v} for k, v in (lines.get(phase) or {}).items()}
                       for phase in ("tests", "import"))
    return dataclasses.replace(run, covered=tests,
                               imported={k: v - tests.get(k, set()) for k, v in imported.items()})


def parse(raw: str | None, status: str, tail: str) -> SuiteRun:
    try:
        data: dict[str, Any] = json.loads(raw) if raw else {}
    except ValueError:
        data = {}
    outcomes: dict[str, str] = {}
    durations: dict[str, float] = {}
    errors: dict[str, str] = {}
    collect: list[str] = []
    message = ""
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    for nodeid, r in data.items():
        if nodeid.startswith("<collect>"):
            collect.append(nodeid[len("<collect>"):])
            message = message or _error_line(str(r.get("msg") or ""))
            continue
        fid = function_id(nodeid)
        if rank[r["outcome"]] >= rank[outcomes.get(fid, "passed")]:
            if r["outcome"] == "failed" and fid not in errors:  # a type name only: a message may quote values
                exc = str(r.get("exc") or "").rsplit(".", 1)[-1]
                errors[fid] = exc if _EXC_NAME.fullmatch(exc) else "failure"
            outcomes[fid] = r["outcome"]
        durations[fid] = durations.get(fid, 0.0) + float(r["duration"])
    return SuiteRun(outcomes, durations, errors, collect, status, tail, collect_message=message)


_E_LINE = re.compile(r"^E\s+(\S.*)$")
_SUMMARY = re.compile(r"^ERROR\s+\S+\s+-\s+(\S.*)$")
_COUNTS = re.compile(r"^[!=\s]*(Interrupted|\d+ (errors?|failed|passed|skipped)\b)")
"""pytest's closing counts (`1 error in 0.05s`, `Interrupted: 1 error during collection`): no error's text."""


def _error_line(line: str) -> str:
    """`E   ModuleNotFoundError: No module named 'attr'` -> the message, at most 200 characters."""
    m = _E_LINE.match(line.strip())
    return (m.group(1) if m else line.strip())[:200]


def collection_error(run: SuiteRun) -> str:
    """The last line of the error that stopped the suite being collected: the plugin's record of the first
    collection error, else from pytest's output (a conftest that fails to import stops pytest before any
    report): its last `E   ...` line, else a summary's `ERROR path - ...`, else its last line that names an
    error; "" when the output says none."""
    if run.collect_message:
        return run.collect_message
    lines = [ln.rstrip() for ln in run.tail.splitlines() if ln.strip()]
    for pattern in (_E_LINE, _SUMMARY):
        found = [m.group(1) for m in map(pattern.match, lines) if m]
        if found:
            return found[-1].strip()[:200]
    named = [ln.strip(" =") for ln in lines if re.search(r"error\b", ln, re.IGNORECASE)
             and not _COUNTS.match(ln)]
    return named[-1][:200] if named else ""


Runner = Callable[[dict[str, str], Sequence[str]], SuiteRun]
"""(files, test files) -> SuiteRun: how the builder runs a suite (a sandbox run; tests pass a double)."""
