"""The environment a project's tests run in: a venv made for it, cached by a hash of what was installed.

It holds pytest and the project's declared test dependencies, never the project itself (the tests import the
workspace's copy, which is what the model edits). The sandbox pool runs this venv's interpreter, so its prefix
is mounted read-only in every job; nothing is installed into the host's own environment.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
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


def env_key(reqs: list[str]) -> str:
    """The cache key of an environment: the interpreter's version and what was installed."""
    blob = json.dumps({"python": sys.version.split()[0], "reqs": sorted(reqs)})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class EnvError(RuntimeError):
    """The project's environment could not be made (its dependencies do not install)."""


def ensure_env(reqs: list[str], cache: Path) -> Path:
    """The interpreter of the venv for `reqs` under `cache/envs/<key>`, made once (a `.done` marker says it is
    complete; a half-made one is removed and made again)."""
    root = cache / "envs" / env_key(reqs)
    python = root / "bin" / "python"
    if (root / ".done").is_file():
        return python
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [[base, "-m", "venv", str(root)],
             [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", *reqs]]
    for argv in steps:
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            last = (res.stderr.strip().splitlines() or ["failed"])[-1]
            raise EnvError(f"the environment does not build: {last[:200]}")
    (root / "requirements.txt").write_text("\n".join(reqs) + "\n")
    (root / ".done").write_text("")
    return python
