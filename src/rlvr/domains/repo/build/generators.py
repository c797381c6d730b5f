"""Candidate breaks of a project: the `repo` domain's mutation operators, a function's body removed
("implement this"), and, in a git checkout, a real past change reverted. Each generator yields candidates in a
fixed order, so (project, generator, file, operator, site) names a candidate again."""
from __future__ import annotations

import ast
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import rlvr.domains.repo.mutate as repo_mutate

STUB = "stub_function"
MUTATION_OPERATORS = tuple(op for op in repo_mutate.OPERATORS if op != STUB)


@dataclass(frozen=True)
class Candidate:
    """One candidate break: the files it changes (new text) and what it did (never shown to the model)."""

    generator: str
    """`mutation`, `implement` or `revert`."""
    changes: dict[str, str]
    """Path -> broken text."""
    file: str
    """The main file changed."""
    line: int
    """First line of the change in the original file."""
    summary: str
    """What was changed."""
    operator: str = ""
    site: int = -1
    commit: str = ""
    function: str = ""
    """The function whose body was removed (implement)."""
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        stem = Path(self.file).with_suffix("").as_posix().replace("/", ".")
        tail = f"{self.operator}-{self.site}" if self.operator else self.commit
        return f"{self.generator}-{stem}-{tail}"


Covered = dict[str, set[int]]
"""Source file -> the lines of it the project's tests run (None: unknown, every site is a candidate)."""


def _sites(sources: dict[str, str], operators: tuple[str, ...], rng: random.Random,
           covered: Covered | None = None, imported: Covered | None = None) -> list[tuple]:
    """(file, operator, site, edit) of every edit, shuffled; with `covered`, only edits that start on a line
    the tests run (a break in code no test reaches, such as a script, cannot make a test fail), then, shuffled
    apart and after them, those on lines run only at import (`imported`: a module's rule tables may matter,
    its data tables seldom do)."""
    sites = [(rel, op, site, edit) for rel in sorted(sources) for op in operators
             for site, edit in enumerate(repo_mutate.edits_of(sources[rel], op))]
    if covered is None:
        rng.shuffle(sites)
        return sites
    first = [s for s in sites if s[3].start[0] in covered.get(s[0], ())]
    later = [s for s in sites if s[3].start[0] in (imported or {}).get(s[0], ())]  # disjoint from `covered`
    rng.shuffle(first)
    rng.shuffle(later)
    return first + later


def mutations(sources: dict[str, str], rng: random.Random, covered: Covered | None = None,
              imported: Covered | None = None) -> Iterator[Candidate]:
    """The mutants of the source files by the mutation operators (comparison flips, off-by-one, ...), in an
    order drawn from `rng` (each made only when it is asked for), on lines the tests run when `covered` says
    (then on lines run only at import)."""
    for rel, op, site, edit in _sites(sources, MUTATION_OPERATORS, rng, covered, imported):
        m = repo_mutate.mutant_at(rel, sources[rel], op, site, edit)
        if m is not None:
            yield Candidate("mutation", {rel: m.source}, rel, m.line, m.summary, op, site)


def implementations(sources: dict[str, str], rng: random.Random, covered: Covered | None = None
                    ) -> Iterator[Candidate]:
    """Documented public functions with their body removed (the docstring stays), in an order drawn from
    `rng`; with `covered`, only functions whose body the tests run."""
    for rel, op, site, edit in _sites(sources, (STUB,), rng, covered):
        m = repo_mutate.mutant_at(rel, sources[rel], op, site, edit)
        if m is not None:
            yield Candidate("implement", {rel: m.source}, rel, m.line, m.summary, op, site,
                            function=m.summary.split()[2])


def reverts(root: Path, sources: dict[str, str], max_commits: int = 200) -> Iterator[Candidate]:
    """Each recent commit that changed source files, undone in those files (the tree otherwise as it is
    now)."""
    if not (root / ".git").exists():
        return
    log = subprocess.run(["git", "-C", str(root), "log", f"-{max_commits}", "--format=%H", "--no-merges"],
                         capture_output=True, text=True, check=False).stdout.split()
    for commit in log:
        names = subprocess.run(["git", "-C", str(root), "diff", "--name-only", f"{commit}^", commit],
                               capture_output=True, text=True, check=False).stdout.split()
        touched = [n for n in names if n in sources]
        if not touched:
            continue
        changes: dict[str, str] = {}
        for rel in touched:
            old = subprocess.run(["git", "-C", str(root), "show", f"{commit}^:{rel}"], capture_output=True,
                                 text=True, check=False)
            if old.returncode != 0 or old.stdout == sources[rel]:
                continue
            try:
                ast.parse(old.stdout)
            except SyntaxError:
                continue
            changes[rel] = old.stdout
        if changes:
            first = min(changes)
            yield Candidate("revert", changes, first, _first_diff_line(sources[first], changes[first]),
                            f"commit {commit[:12]} reverted in {', '.join(sorted(changes))}",
                            commit=commit[:12])


def _first_diff_line(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), 1):
        if x != y:
            return i
    return min(len(a.splitlines()), len(b.splitlines())) + 1


GENERATORS = ("mutation", "implement", "revert")
"""The generators, in the order a build interleaves them."""
