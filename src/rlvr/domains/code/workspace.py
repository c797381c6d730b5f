"""The workspaces the code verifier judges, and what their files tell the harness.

The candidate's final workspace (its files, or a single-turn answer laid into the answer file), the reference
solution's, and what the harness needs to know of them: the top-level module names, the modules hidden tests
import from beside them, the installed modules they import that a candidate could shadow, and which code is
the task's own rather than the candidate's. In the sandbox the candidate's files sit under `CAND/`, the
judge's (hidden tests, harness) under `JUDGE/`.
"""
from __future__ import annotations

import ast
import importlib.util
import posixpath
import sys
from collections.abc import Iterable
from typing import Any

from rlvr.domains.code.settings import CodeSettings
from rlvr.tasks.spec import Files, FinalState, Task
from rlvr.verify.extract import apply_template, code_from_answer

CAND, JUDGE = "cand", "judge"
"""The sandbox directories of the candidate's workspace and of the judge's files."""


def reference_files(task: Task, s: CodeSettings) -> Files | None:
    """The reference solution's workspace: the task's gold `solution/` over its workspace, or a single-turn
    task's gold answer laid into the answer file; None when the task has neither."""
    if task.solution:
        return {**task.workspace, **task.solution}
    if s.answer_file is not None and isinstance(task.answer, str) and task.answer.strip():
        return candidate_files(task, FinalState(answer=task.answer), s)
    return None


def candidate_files(task: Task, final: FinalState, s: CodeSettings) -> Files:
    """The final workspace: the files, or for single-turn tasks the answer laid into the answer file. The
    interpreter's caches (`__pycache__/`) are left out, as every reader of a workspace leaves them: the judge
    compiles sources itself, so bytecode found during its run was written by the candidate's code then."""
    if s.answer_file is None:
        return {p: t for p, t in final.files.items() if "__pycache__" not in p.split("/")}
    files = dict(final.files or task.workspace)
    files[s.answer_file] = apply_template(s.answer_template, code_from_answer(final.answer))
    return files


def top_level(paths: Iterable[str]) -> set[str]:
    """The top-level module or package names of workspace paths (`pkg/mod.py` -> `pkg`, `m.py` -> `m`)."""
    return {p.split("/", 1)[0].removesuffix(".py") for p in paths}


def task_code(task: Task, files: Files) -> dict[str, Any]:
    """What of the final workspace is the task's own code rather than the candidate's, for the harness to
    charge stack inspection to nobody: `unchanged`, the Python files exactly as the task shipped them, and
    `task_lines`, per changed file the lines whose text the shipped file or the reference solution has (a gold
    that restores a real project's deprecation helper reading its caller's frame is the project's code)."""
    unchanged, lines = [], {}
    for path, text in files.items():
        if not path.endswith(".py"):
            continue
        if task.workspace.get(path) == text:
            unchanged.append(path)
            continue
        known = {ln.strip() for src in (task.workspace.get(path), (task.solution or {}).get(path)) if src
                 for ln in src.splitlines()} - {""}
        same = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() in known]
        if same:
            lines[path] = same
    return {"unchanged": sorted(unchanged), "task_lines": lines}


def sibling_modules(judge_files: Iterable[str], tests: Iterable[str]) -> dict[str, str]:
    """Module name -> judge path of the modules a hidden test imports by bare name from beside it: pytest's
    default (`prepend`) import mode puts the first directory above a test file (or conftest) without an
    `__init__.py` on sys.path, so `from helpers import f` finds `tests/helpers.py` (and a package
    `tests/helpers/`). The worker serves them from the judge directory through the assert rewriter, like the
    tests. The judge root is on sys.path already; a name that is not an identifier cannot be imported."""
    paths = set(judge_files)
    out: dict[str, str] = {}
    for test in tests:
        base = posixpath.dirname(test)
        while base and f"{base}/__init__.py" in paths:
            base = posixpath.dirname(base)
        if not base:
            continue
        for p in sorted(paths):
            rest = p[len(base) + 1:].split("/") if p.startswith(base + "/") and p.endswith(".py") else []
            name = rest[0].removesuffix(".py") if len(rest) == 1 and rest[0] != "__init__.py" else \
                rest[0] if len(rest) == 2 and rest[1] == "__init__.py" else ""
            if name.isidentifier():
                out.setdefault(name, p)
    return out


def test_imports(hidden_tests: Files, initial: Files, s: CodeSettings | None = None) -> set[str]:
    """Top-level modules the hidden tests import that the workspace as shipped does not provide (a module
    under one of its import roots, src/pkg of a src layout, is the workspace's own): the standard library's,
    an installed package's, or a helper beside the tests. Which of them the task's environment has is for the
    harness to find out there (a task's requirements venv is not this interpreter's)."""
    provided = top_level(q for p in initial for q in (p, s.importable(p) if s else p))
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
    return names - provided


def shadowable(hidden_tests: Files, initial: Files, s: CodeSettings | None = None) -> set[str]:
    """Of `test_imports`, those this interpreter finds (stdlib or installed here); the harness adds the task's
    own environment's (`installed` in the worker)."""
    out = set()
    for name in test_imports(hidden_tests, initial, s):
        if name in sys.stdlib_module_names:
            out.add(name)
            continue
        try:
            if importlib.util.find_spec(name) is not None:
                out.add(name)
        except (ImportError, ValueError):
            continue
    return out


def entry_syntax_error(files: Files, s: CodeSettings) -> str | None:
    """What the harness would report for a run without hidden tests whose entry module does not compile (the
    first candidate code such a run imports, so nothing else can have run before), read on the host: the
    `SyntaxError: ...` line, or None when the module compiles or the sandbox must decide (a dotted or package
    entry, a module the standard library or an extension could provide, one that is not a candidate file).
    Valid only for the interpreter this process runs (the caller checks the sandbox runs the same one)."""
    spec = s.io or s.cases
    if spec is None or s.tests:
        return None
    module = spec.entry.partition(":")[0]
    if "." in module or module in sys.stdlib_module_names or module in sys.builtin_module_names:
        return None
    for root in ("", *s.import_roots):
        base = f"{root.strip('/')}/" if root.strip("/") else ""
        path = f"{base}{module}.py"
        if any(p.startswith((f"{base}{module}/", f"{base}{module}.")) and p != path for p in files):
            return None  # a package, or an extension module, that the import system may prefer
        if path in files:
            text = files[path]
            try:
                compile(text.encode() if isinstance(text, str) else text, path, "exec", dont_inherit=True)
            except SyntaxError as exc:
                return f"{type(exc).__name__}: {exc}"[:500]
            except (ValueError, RecursionError, MemoryError):
                return None
            return None
    return None
