"""What a project's tests need: pytest and the test dependencies the project declares, and the venv that holds
them, with a pin that cannot install on this Python relaxed.

A built task records them as its `requirements`; the venv that holds them (never the project itself: the tests
import the workspace's copy, which is what the model edits) is made by `rlvr.sandbox.venvs`, and wherever the
task is run or judged the sandbox runs that venv's interpreter (`rlvr.sandbox.requirements.pool_for`).
"""
from __future__ import annotations

import configparser
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from rlvr.sandbox import venvs

TEST_EXTRAS = ("test", "tests", "testing", "dev")
BASE_REQUIREMENTS = ("pytest",)
LEFT_OUT = ("coverage", "pytest-cov")
"""Test requirements never installed: coverage is not what the tests check, and the builder's runs never ask
for it."""
TEST_WORDS = {"test", "tests", "testing", "dev", "develop", "development"}
"""A requirements file whose name has one of these words (split at `-`, `_`, `.`) holds test requirements."""
RUNTIME_STEMS = {"requirements", "base", "install", "runtime"}
"""`requirements.txt`, `requirements/base.txt`, ...: the project's runtime dependencies, which its tests
need."""
TOX_SECTIONS = ("testenv", "testenv:py", "testenv:py3", "testenv:test", "testenv:tests", "testenv:testing",
                "testenv:unit")
MAX_FILES = 50
"""Most requirement files read per project (`-r` includes included)."""
MAX_PIP = 8
"""Most venv builds (pip runs) one environment may take while pins are relaxed."""
PIN_OPS = ("==", "===", "<=", "<", "~=")
"""Specifiers that hold a requirement to an old version (a relaxed one drops its specifier)."""


def requirements(root: Path) -> list[str]:
    """pytest plus the test dependencies the project declares: pyproject extras and dependency groups (`test`,
    `tests`, `testing`, `dev`, and those tox.ini's `extras` names), setup.cfg's `install_requires` and those
    extras, tox.ini's `[testenv] deps`, and requirement files: `requirements.txt` and the `*requirements*.txt`
    at the root, under `requirements/` and in the test directory whose names say test/tests/testing/dev (or
    runtime), with every `-r FILE` / `--requirement FILE` they or tox's deps include (relative to the
    including file, `{toxinidir}` the project's root), each read once. Options (`-e`, `-c`, `--index-url`),
    URLs, paths and coverage tools are left out; environment markers stay for pip to evaluate."""
    root = root.resolve()
    reqs: list[str] = list(BASE_REQUIREMENTS)
    seen: set[Path] = set()
    tox_deps, tox_extras = _tox(root)
    extras = (*TEST_EXTRAS, *(e for e in tox_extras if e not in TEST_EXTRAS))
    reqs += _pyproject(root, extras) + _setup_cfg(root, extras)
    reqs += _lines(tox_deps, root, root, seen, tox=True)
    for f in requirement_files(root):
        reqs += _read(f, root, seen)
    return sorted(dict.fromkeys(r for r in reqs if _valid(r)))


def requirement_files(root: Path) -> list[Path]:
    """The requirements files read without being included: named so at the root, under `requirements/`, and in
    `tests/` (`test/`, `testing/`)."""
    found: list[Path] = []
    for where, needs_word in ((root, True), (root / "requirements", False), (root / "tests", True),
                              (root / "test", True), (root / "testing", True)):
        if not where.is_dir():
            continue
        for f in sorted(where.glob("*.txt")):
            words = set(re.split(r"[-_.]+", f.stem.lower()))
            if needs_word and not words & {"requirements", "reqs"}:
                continue
            if words & TEST_WORDS or f.stem.lower() in RUNTIME_STEMS:
                found.append(f)
    return found


def _pyproject(root: Path, extras: Sequence[str]) -> list[str]:
    f = root / "pyproject.toml"
    if not f.is_file():
        return []
    try:
        data = tomllib.loads(f.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    project = _table(data, "project")
    optional, groups = _table(project, "optional-dependencies"), _table(data, "dependency-groups")
    out = _strs(project.get("dependencies"))
    for extra in extras:
        out += _strs(optional.get(extra)) + _strs(groups.get(extra))
    return out


def _table(data: dict, key: str) -> dict:
    return data.get(key) if isinstance(data.get(key), dict) else {}  # type: ignore[return-value]


def _strs(value: object) -> list[str]:
    """The strings of a TOML array (a dependency group's `{include-group = ...}` tables left out)."""
    return [r for r in value if isinstance(r, str)] if isinstance(value, list) else []


def _config(f: Path) -> configparser.ConfigParser | None:
    if not f.is_file():
        return None
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(f.read_text(encoding="utf-8"))
    except (configparser.Error, UnicodeDecodeError):
        return None
    return cfg


def _setup_cfg(root: Path, extras: Sequence[str]) -> list[str]:
    """setup.cfg's `install_requires` and test extras."""
    cfg = _config(root / "setup.cfg")
    if cfg is None:
        return []
    out = cfg.get("options", "install_requires", fallback="").splitlines()
    for extra in extras:
        out += cfg.get("options.extras_require", extra, fallback="").splitlines()
    return [_strip_comment(r) for r in out]


def _tox(root: Path) -> tuple[list[str], list[str]]:
    """tox.ini's test environments' `deps` lines and the project extras they install."""
    cfg = _config(root / "tox.ini")
    if cfg is None:
        return [], []
    deps: list[str] = []
    extras: list[str] = []
    for section in TOX_SECTIONS:
        deps += cfg.get(section, "deps", fallback="").splitlines()
        extras += [e.strip() for e in re.split(r"[,\s]+", cfg.get(section, "extras", fallback=""))
                   if e.strip()
                   and re.fullmatch(r"[A-Za-z0-9._-]+", e.strip())]
    return deps, extras


def _read(f: Path, root: Path, seen: set[Path]) -> list[str]:
    """A requirements file's requirements, its includes followed (each file once: a cycle ends)."""
    f = f.resolve()
    if f in seen or len(seen) >= MAX_FILES or not f.is_file() or not f.is_relative_to(root):
        return []
    seen.add(f)
    try:
        text = f.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    # continued lines joined
    return _lines(re.sub(r"\s*\\\n\s*", " ", text).splitlines(), f.parent, root, seen)


_INCLUDE = re.compile(r"^(?:-r|--requirement)(?:\s*=\s*|\s*)(\S+)$")
_FACTOR = re.compile(r"^[A-Za-z0-9_.,!{}-]+:\s")
"""A tox factor-conditional line (`py38: mock`): for some environments only, left out."""


def _lines(lines: Iterable[str], base: Path, root: Path, seen: set[Path], tox: bool = False) -> list[str]:
    out: list[str] = []
    for raw in lines:
        line = _strip_comment(raw)
        if tox:
            line = line.replace("{toxinidir}", str(root))
            if _FACTOR.match(line):
                continue
        include = _INCLUDE.match(line)
        if include:
            out += _read(base / include.group(1), root, seen)
        elif line and not line.startswith("-") and "{" not in line:
            out.append(re.sub(r"\s+--\S.*$", "", line))  # per-requirement options (`--hash=...`) dropped
    return out


def _strip_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line).strip()


def _valid(line: str) -> bool:
    """A requirement pip installs from the index (no URL, no path, no coverage tool)."""
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return False
    return req.url is None and canonicalize_name(req.name) not in LEFT_OUT


@dataclass(frozen=True)
class ProjectVenv:
    """A project's environment as made."""

    python: Path
    """The venv's interpreter."""
    requirements: list[str]
    """What it holds (the project's requirements, the relaxed pins relaxed)."""
    relaxed: list[str] = field(default_factory=list)
    """Each pin relaxed to make it (`"foo==1.0 -> foo"`)."""


def pinned(line: str) -> bool:
    """Whether a requirement holds its package to an old version (`==`, `<=`, `<`, `~=`)."""
    try:
        return any(s.operator in PIN_OPS for s in Requirement(line).specifier)
    except InvalidRequirement:
        return False


def relax(line: str) -> str:
    """The requirement with its version specifier dropped, its extras and marker kept (`foo[x]==1.0; m` ->
    `foo[x]; m`)."""
    req = Requirement(line)
    marker = line.split(";", 1)[1].strip() if ";" in line else ""
    return req.name + (f"[{','.join(sorted(req.extras))}]" if req.extras else "") + (f"; {marker}" if marker
                                                                                     else "")


def _named(error: object, line: str) -> bool:
    """Whether pip's last line names this requirement's package (`No matching distribution found for
    foo==1.0`)."""
    words = re.sub(r"[-_.]+", "-", str(error).lower())
    name = canonicalize_name(Requirement(line).name)
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", words) is not None


def make_venv(reqs: Sequence[str], cache: Path, max_attempts: int = MAX_PIP) -> ProjectVenv:
    """The venv for `reqs` (`venvs.ensure_env`); when it does not build, the pins that stop it are relaxed:
    first those pip's error names, one at a time; else every pin at once (when that fails too the pins were
    not the cause: the first error is raised), then pins restored half a group at a time while builds remain,
    so only the pins that must go stay relaxed. At most `max_attempts` builds; EnvError when none succeeds."""
    reqs = list(reqs)
    attempts = 0
    relaxed: set[str] = set()

    def current() -> list[str]:
        return sorted(dict.fromkeys(relax(r) if r in relaxed else r for r in reqs))

    def attempt() -> tuple[Path | None, venvs.EnvError | None]:
        nonlocal attempts
        attempts += 1
        try:
            return venvs.ensure_env(current(), cache), None
        except venvs.EnvError as exc:
            return None, exc

    python, first = attempt()
    if python is not None:
        return ProjectVenv(python, current())
    assert first is not None
    pins = [r for r in reqs if pinned(r)]
    error: venvs.EnvError | None = first
    while python is None and attempts < max_attempts:
        named = [p for p in pins if p not in relaxed and _named(error, p)]
        if not named:
            break
        relaxed.add(named[0])
        python, error = attempt()
    if python is None:
        if set(pins) <= relaxed or attempts >= max_attempts:
            raise first
        relaxed.update(pins)
        python, error = attempt()
        if python is None:
            raise first
        groups = [pins[:len(pins) // 2], pins[len(pins) // 2:]] if len(pins) > 1 else []
        while groups and attempts < max_attempts:
            group = groups.pop(0)
            relaxed.difference_update(group)
            got, _ = attempt()
            if got is not None:
                python = got
                continue
            relaxed.update(group)
            if len(group) > 1:
                groups += [group[:len(group) // 2], group[len(group) // 2:]]
    return ProjectVenv(python, current(), [f"{r} -> {relax(r)}" for r in reqs if r in relaxed])
