"""The environment a project's tests run in: a venv made for it, cached by a hash of what was installed.

It holds pytest and the project's declared test dependencies, never the project itself (the tests import the
workspace's copy, which is what the model edits). A built task records them as its `requirements`; wherever it
is run or judged, the sandbox runs this venv's interpreter (`rlvr.sandbox.requirements.pool_for`), so its prefix
is mounted read-only in every job; nothing is installed into the host's own environment.

The venvs live under `env_cache()/envs/<key>` (`$RLVR_ENV_CACHE`, else the user's cache directory), one cache
for the builder and every later run, so a task finds the environment it was built with.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
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


def env_cache() -> Path:
    """Where environments are kept: `$RLVR_ENV_CACHE`, else `$XDG_CACHE_HOME/rlvr` (default `~/.cache/rlvr`)."""
    if os.environ.get("RLVR_ENV_CACHE"):
        return Path(os.environ["RLVR_ENV_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlvr"


def _base_python() -> str:
    return getattr(sys, "_base_executable", sys.executable)


def env_key(reqs: Sequence[str]) -> str:
    """The cache key of an environment: the base interpreter (a venv links to it) and what was installed."""
    blob = json.dumps({"python": sys.version.split()[0], "base": _base_python(), "reqs": sorted(reqs)})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class EnvError(RuntimeError):
    """The project's environment could not be made (its dependencies do not install)."""


def ensure_env(reqs: Sequence[str], cache: Path) -> Path:
    """The interpreter of the venv for `reqs` under `cache/envs/<key>`, made once (a `.done` marker says it is
    complete; a half-made one is removed and made again). Concurrent callers, in threads or processes, wait on a
    lock file and find it made."""
    root = cache / "envs" / env_key(reqs)
    python = root / "bin" / "python"
    if (root / ".done").is_file():
        return python
    locks = cache / "locks"  # beside the environments, never among them
    locks.mkdir(parents=True, exist_ok=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / ".done").is_file():
            return python
        shutil.rmtree(root, ignore_errors=True)
        steps = [[_base_python(), "-m", "venv", str(root)],
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


def satisfied(reqs: Sequence[str], python: str) -> bool:
    """Whether `python` is this process's own interpreter and already has every requirement installed (then
    it serves them itself, with no venv made). Another interpreter is never inspected: False."""
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        return False
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    for line in reqs:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            return False
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return False
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            return False
        if req.extras:
            return False  # what an extra pulls in is not checked here: the venv is made
    return True
