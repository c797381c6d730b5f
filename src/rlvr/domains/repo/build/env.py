"""What a project's tests need: pytest and the test dependencies the project declares.

A built task records them as its `requirements`; the venv that holds them (never the project itself: the tests
import the workspace's copy, which is what the model edits) is made by `rlvr.sandbox.venvs`, and wherever the
task is run or judged the sandbox runs that venv's interpreter (`rlvr.sandbox.requirements.pool_for`).
"""
from __future__ import annotations

from pathlib import Path

import tomllib

TEST_EXTRAS = ("test", "tests", "testing", "dev")
BASE_REQUIREMENTS = ("pytest",)


def requirements(root: Path) -> list[str]:
    """pytest plus the test dependencies the project declares (pyproject extras and dependency groups, setup.cfg
    extras, tox.ini's testenv deps, requirements-test files, and its runtime dependencies)."""
    reqs: list[str] = list(BASE_REQUIREMENTS)
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            data = {}
        project = data.get("project", {})
        reqs += [str(r) for r in project.get("dependencies", [])]
        for extra in TEST_EXTRAS:
            reqs += [str(r) for r in project.get("optional-dependencies", {}).get(extra, [])]
            reqs += [str(r) for r in data.get("dependency-groups", {}).get(extra, []) if isinstance(r, str)]
    reqs += _cfg_requirements(root)
    for name in ("requirements-test.txt", "requirements-tests.txt", "test-requirements.txt",
                 "requirements/test.txt", "requirements/tests.txt"):
        f = root / name
        if f.is_file():
            reqs += [ln.split("#")[0].strip() for ln in f.read_text().splitlines()
                     if ln.strip() and not ln.lstrip().startswith(("#", "-"))]
    return sorted(dict.fromkeys(r for r in reqs if r and not r.startswith(("coverage", "pytest-cov"))))


def _cfg_requirements(root: Path) -> list[str]:
    """setup.cfg's `install_requires` and test extras, and tox.ini's `[testenv] deps` (substitutions, `-r` and
    `-e` lines left out)."""
    import configparser

    out: list[str] = []
    for name, entries in (("setup.cfg", [("options", "install_requires"),
                                         *(("options.extras_require", e) for e in TEST_EXTRAS)]),
                          ("tox.ini", [("testenv", "deps")])):
        f = root / name
        if not f.is_file():
            continue
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read_string(f.read_text(encoding="utf-8"))
        except (configparser.Error, UnicodeDecodeError):
            continue
        for section, key in entries:
            value = cfg.get(section, key, fallback="")
            out += [ln.split("#")[0].strip() for ln in value.splitlines()]
    return [r for r in out if r and not r.startswith(("-", "{", ".")) and "{" not in r]
