"""Structural soundness checks of a candidate's code: compile, import, ruff lint and mypy types, with partial
credit."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rlvr.sandbox.base import Sandbox, SandboxPool
from rlvr.sandbox.limits import for_task
from rlvr.sandbox.result import ExecLimits
from rlvr.tasks.spec import Files, Task
from rlvr.verify.findings import role_of
from rlvr.verify.verdict import Check

if TYPE_CHECKING:
    from rlvr.domains.code.settings import StaticCheck

ToolResult = tuple[float, str]
"""(score in [0, 1], detail)."""


class ToolMissing(RuntimeError):
    """A checking tool is not installed in the sandbox's interpreter (the verifier cannot judge)."""


def _code_files(files: Files) -> list[str]:
    return sorted(p for p in files if p.endswith(".py") and role_of(p) == "code")


def _compile(sb: Sandbox, check: StaticCheck, files: Files, limits: ExecLimits) -> ToolResult:
    """Compiles every code file on the host: compiling never runs the code."""
    paths = _code_files(files)
    bad = []
    for p in paths:
        try:
            compile(files[p], p, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            bad.append(f"{p}:{getattr(exc, 'lineno', '?')}: {exc.__class__.__name__}: "
                       f"{getattr(exc, 'msg', exc)}")
    if not paths:
        return 0.0, "no Python files"
    return (len(paths) - len(bad)) / len(paths), "; ".join(bad[:3])


def _import(sb: Sandbox, check: StaticCheck, files: Files, limits: ExecLimits) -> ToolResult:
    modules = check.modules or [p.removesuffix(".py").replace("/__init__", "").replace("/", ".")
                                for p in _code_files(files) if "/" not in p or p.endswith("/__init__.py")]
    if not modules:
        return 0.0, "no modules to import"
    script = ("import importlib, sys\nsys.path.insert(0, '.')\nbad = []\n"
              f"for m in {modules!r}:\n    try:\n        importlib.import_module(m)\n"
              "    except BaseException as e:\n        bad.append(f'{m}: {type(e).__name__}: {e}'[:200])\n"
              "print('RLVR-IMPORT', len(bad), '|'.join(bad))\n")
    res = sb.run(["python", "-c", script], limits=limits)
    line = next((x for x in reversed(res.stdout.splitlines()) if x.startswith("RLVR-IMPORT ")), None)
    if line is None:
        return 0.0, f"import run ended {res.status.value} {res.stderr[-200:]}"
    parts = line.split(" ", 2)
    nbad = int(parts[1])
    return (len(modules) - nbad) / len(modules), parts[2] if len(parts) > 2 else ""


def _ruff(sb: Sandbox, check: StaticCheck, files: Files, limits: ExecLimits) -> ToolResult:
    paths = _code_files(files)
    if not paths:
        return 0.0, "no Python files"
    argv = ["python", "-m", "ruff", "check", "--isolated", "--no-cache", "--output-format", "json",
            "--exit-zero",
            "--ignore-noqa"]
    if check.select:
        argv += ["--select", ",".join(check.select)]
    res = sb.run([*argv, *paths], limits=limits)
    if "No module named ruff" in res.stderr:
        raise ToolMissing("ruff is not installed in the sandbox's interpreter")
    try:
        issues = json.loads(res.stdout or "[]")
    except ValueError:
        return 0.0, f"ruff failed: {res.stderr[-200:]}"
    detail = "; ".join(f"{i['filename'].rsplit('/', 1)[-1]}:{i['location']['row']} {i['code']}"
                       for i in issues[:5])
    return max(0.0, 1 - len(issues) / check.max_issues), detail


def _types(sb: Sandbox, check: StaticCheck, files: Files, limits: ExecLimits) -> ToolResult:
    paths = _code_files(files)
    if not paths:
        return 0.0, "no Python files"
    res = sb.run(["python", "-m", "mypy", "--config-file", "", "--ignore-missing-imports", "--no-incremental",
                  "--follow-imports=silent", "--no-error-summary", "--show-error-codes", *paths],
                  limits=limits)
    if "No module named mypy" in res.stderr:
        raise ToolMissing("mypy is not installed in the sandbox's interpreter")
    errors = [x for x in res.stdout.splitlines() if ": error:" in x]
    return max(0.0, 1 - len(errors) / check.max_issues), "; ".join(errors[:3])


TOOLS: dict[str, Callable[[Sandbox, StaticCheck, Files, ExecLimits], ToolResult]] = {
    "compile": _compile, "import": _import, "ruff": _ruff, "types": _types,
}


def run_static_checks(pool: SandboxPool, checks: Sequence[StaticCheck], files: Files,
                      task: Task) -> tuple[list[Check], str | None]:
    """Run each declared check in its own lease (apart from the hidden tests); (checks, infra error or
    None)."""
    own = for_task(pool, task)  # [sandbox] defaults < the task's limits; linters and mypy need at least these
    limits = for_task(pool, task, timeout_s=max(own.timeout_s, 30.0), memory_mb=max(own.memory_mb, 512))
    out: list[Check] = []
    with pool.lease(files) as sb:
        for check in checks:
            try:
                score, detail = TOOLS[check.kind](sb, check, files, limits)
            except ToolMissing as exc:
                return out, str(exc)
            out.append(Check(name=f"check:{check.kind}", score=score, weight=check.weight,
                             passed=score == 1.0, detail=detail[:500]))
    return out, None
