"""Bug injection for the `repo` domain: ast-based mutation operators that edit one expression or statement of
a source file in place (the rest of the file keeps its text), and the pack builder that keeps only mutants
that break at least one test of a project whose original passes them all.

Run `python -m rlvr.domains.repo.mutate` to rebuild `projects/manifest.json` after editing a project.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PROJECTS_DIR = Path(__file__).with_name("projects")
MANIFEST = PROJECTS_DIR / "manifest.json"
TESTS_DIR = "tests"
_PARAMS = re.compile(r"\[.*$")  # a parametrised item's id suffix


@dataclass(frozen=True)
class Edit:
    """Replace the text between two (line, column) positions (1-based lines, 0-based columns)."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str
    """Replacement text."""
    summary: str
    """What the edit does, for the task's metadata (never shown to the model)."""


@dataclass(frozen=True)
class Mutant:
    """One injected bug: the operator, its site in the file, and the mutated file text."""

    file: str
    """Project-relative path of the mutated file."""
    operator: str
    """Name of the operator in OPERATORS."""
    site: int
    """Index of the edit among the operator's edits of the original file."""
    line: int
    """First line of the edited code in the original file."""
    source: str
    """The mutated file text."""
    summary: str
    """What was changed (for metadata; never shown to the model)."""


def _span(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
    return ((node.lineno, node.col_offset),  # type: ignore[attr-defined]
            (node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]


def _replace(node: ast.expr, new: ast.expr, summary: str) -> Edit:
    start, end = _span(node)
    return Edit(start, end, ast.unparse(new), summary)


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of docstring constants (never mutated)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


def flip_comparison(tree: ast.Module) -> Iterator[Edit]:
    """`a < b` -> `a <= b`, `==` -> `!=`, `in` -> `not in`, ..."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
            new = copy.deepcopy(node)
            new.ops = [_FLIP[type(node.ops[0])]()]
            yield _replace(node, new,
                           f"comparison {type(node.ops[0]).__name__} -> {type(new.ops[0]).__name__}")


def off_by_one(tree: ast.Module) -> Iterator[Edit]:
    """An integer literal n -> n - 1 (n + 1 for 0 and 1)."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and type(node.value) is int and id(node) not in skip
                and node.col_offset >= 0):
            n = node.value
            yield _replace(node, ast.Constant(n - 1 if n > 1 else n + 1), f"constant {n} off by one")


def swap_operands(tree: ast.Module) -> Iterator[Edit]:
    """`a - b` -> `b - a` for the non-commutative operators."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op,
                                                      (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)):
            new = ast.BinOp(left=copy.deepcopy(node.right), op=node.op, right=copy.deepcopy(node.left))
            yield _replace(node, new, f"operands of {type(node.op).__name__} swapped")


def wrong_operator(tree: ast.Module) -> Iterator[Edit]:
    """`+` <-> `-`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            new = copy.deepcopy(node)
            new.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
            yield _replace(node, new, f"operator {type(node.op).__name__} -> {type(new.op).__name__}")


def flip_boolean(tree: ast.Module) -> Iterator[Edit]:
    """`and` <-> `or`, and `True` <-> `False`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp):
            new = copy.deepcopy(node)
            new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            yield _replace(node, new, f"boolean {type(node.op).__name__} -> {type(new.op).__name__}")
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield _replace(node, ast.Constant(not node.value), f"constant {node.value} -> {not node.value}")


def negate_condition(tree: ast.Module) -> Iterator[Edit]:
    """The condition of an `if` or `while` negated."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While)):
            yield _replace(node.test, ast.UnaryOp(ast.Not(), copy.deepcopy(node.test)), "condition negated")


def drop_statement(tree: ast.Module) -> Iterator[Edit]:
    """An assignment or call statement removed from a block that has others."""
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or len(body) < 2 or isinstance(node, (ast.Module, ast.ClassDef)):
                continue
            for stmt in body:
                if isinstance(stmt, (ast.Assign, ast.AugAssign)) or (
                        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                    yield Edit((stmt.lineno, 0), (stmt.end_lineno + 1, 0), "",  # type: ignore[operator]
                               f"statement on line {stmt.lineno} dropped")


def stub_function(tree: ast.Module) -> Iterator[Edit]:
    """A documented function's body removed (the docstring stays): a small feature to implement."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and len(node.body) >= 2
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)):
            first, last = node.body[1], node.body[-1]
            indent = " " * first.col_offset
            end = last.end_lineno + 1  # type: ignore[operator]
            yield Edit((first.lineno, 0), (end, 0), f"{indent}pass\n",
                       f"body of {node.name} removed")


OPERATORS: dict[str, Callable[[ast.Module], Iterator[Edit]]] = {
    "flip_comparison": flip_comparison, "off_by_one": off_by_one, "swap_operands": swap_operands,
    "wrong_operator": wrong_operator, "flip_boolean": flip_boolean, "negate_condition": negate_condition,
    "drop_statement": drop_statement, "stub_function": stub_function,
}
"""Mutation operators by name; each yields edits in a fixed order, so (file, operator, site) names a
mutant."""


def apply_edit(source: str, edit: Edit) -> str:
    """The source with the edit applied (columns are UTF-8 byte offsets, as ast reports them)."""
    data = source.encode()
    starts = [0]
    for line in source.encode().splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(pos: tuple[int, int]) -> int:
        return min(starts[min(pos[0] - 1, len(starts) - 1)] + pos[1], len(data))

    return (data[:offset(edit.start)] + edit.text.encode() + data[offset(edit.end):]).decode()


def edits_of(source: str, operator: str) -> list[Edit]:
    """The operator's edits of a source, in site order (site i is the i-th edit)."""
    return sorted(OPERATORS[operator](ast.parse(source)), key=lambda e: (e.start, e.end, e.text))


def mutant_at(file: str, source: str, operator: str, site: int, edit: Edit) -> Mutant | None:
    """The mutant one edit makes, or None when it does not parse or changes nothing."""
    text = apply_edit(source, edit)
    try:
        ast.parse(text)
    except SyntaxError:
        return None
    return Mutant(file, operator, site, edit.start[0], text, edit.summary) if text != source else None


def mutants(file: str, source: str, operators: tuple[str, ...] = tuple(OPERATORS)) -> Iterator[Mutant]:
    """Every mutant of one file that still parses and differs from the original."""
    for name in operators:
        for site, edit in enumerate(edits_of(source, name)):
            m = mutant_at(file, source, name, site, edit)
            if m is not None:
                yield m


def mutant(file: str, source: str, operator: str, site: int) -> Mutant:
    """The mutant named by (operator, site); KeyError when the file no longer has it."""
    for m in mutants(file, source, (operator,)):
        if m.site == site:
            return m
    raise KeyError(f"{file}: no {operator} site {site}")


# ----------------------------------------------------------------------------------------------- pack builder
def read_project(name: str, projects_dir: Path = PROJECTS_DIR) -> dict[str, str]:
    """A project's files (sources and tests) as text, keyed by POSIX path."""
    root = projects_dir / name
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.py"))
            if "__pycache__" not in p.parts}


def project_names(projects_dir: Path = PROJECTS_DIR) -> list[str]:
    """The projects shipped in a projects directory (one sub-directory each)."""
    return sorted(p.name for p in projects_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def test_ids(files: dict[str, str], prefix: str = "") -> list[str]:
    """`path::test_name` of every top-level test function in the project's test files."""
    out = []
    for rel, text in files.items():
        if rel.startswith(TESTS_DIR + "/") and Path(rel).name.startswith("test_"):
            tree = ast.parse(text)
            out += [f"{prefix}{rel[len(TESTS_DIR) + 1:] if prefix else rel}::{n.name}" for n in tree.body
                    if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return out


def run_tests(files: dict[str, str], timeout: float = 30.0) -> dict[str, bool] | None:
    """Run the project's tests with pytest in a temporary copy: test id -> passed (None when it timed out)."""
    ids = test_ids(files)
    with tempfile.TemporaryDirectory(prefix="rlvr-repo-") as tmp:
        for rel, text in files.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                            "--rootdir", tmp, "--junitxml", "report.xml", TESTS_DIR], cwd=tmp, env=env,
                           capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None
        report = Path(tmp) / "report.xml"
        outcome: dict[str, bool] = {}
        for tc in ET.parse(report).getroot().iter("testcase") if report.is_file() else ():
            path = tc.get("classname", "").replace(".", "/") + ".py"
            tid = f"{path}::{_PARAMS.sub('', tc.get('name', ''))}"
            ok = not any(child.tag in ("failure", "error", "skipped") for child in tc)
            outcome[tid] = outcome.get(tid, True) and ok
    return {tid: outcome.get(tid, False) for tid in ids}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_manifest(projects: list[str] | None = None, workers: int = 2, show_progress: bool = True,
                   projects_dir: Path = PROJECTS_DIR) -> list[dict]:
    """Check that each project passes its own tests, then keep every mutant that breaks at least one test."""
    from rich.progress import Progress

    entries: list[dict] = []
    jobs: list[tuple[str, dict[str, str], Mutant]] = []
    for name in projects or project_names(projects_dir):
        files = read_project(name, projects_dir)
        base = run_tests(files)
        if base is None or not all(base.values()) or not base:
            failing = sorted(t for t, ok in (base or {}).items() if not ok)
            raise RuntimeError(f"project {name!r}: the original must pass all its tests (failing: {failing})")
        for rel in sorted(files):
            if not rel.startswith(TESTS_DIR + "/"):
                jobs += [(name, files, m) for m in mutants(rel, files[rel])]

    def check(job: tuple[str, dict[str, str], Mutant]) -> dict | None:
        name, files, m = job
        res = run_tests({**files, m.file: m.source})
        if res is None or all(res.values()):  # hangs, or the tests cannot tell the mutant from the original
            return None
        return {"project": name, "file": m.file, "operator": m.operator, "site": m.site, "line": m.line,
                "summary": m.summary, "source_sha": sha(files[m.file]),
                "fail_to_pass": sorted(t for t, ok in res.items() if not ok),
                "pass_to_pass": sorted(t for t, ok in res.items() if ok)}

    with Progress(disable=not show_progress) as progress, ThreadPoolExecutor(workers) as pool:
        bar = progress.add_task("mutants", total=len(jobs))
        for entry in pool.map(check, jobs):
            progress.advance(bar)
            if entry is not None:
                entries.append(entry)
    return entries


def main() -> None:
    entries = build_manifest()
    MANIFEST.write_text(json.dumps(entries, indent=1) + "\n")
    print(f"{len(entries)} mutants kept in {MANIFEST}")


if __name__ == "__main__":
    main()
