"""The venvs that serve tasks' `requirements`: one per set of requirements, made once with pip and cached by a
hash of the base interpreter and what was installed. The sandbox mounts its prefix read-only in every job that
needs it (`rlvr.sandbox.requirements`), so a candidate can use the packages and never change them; nothing is
installed into the host's own environment.

The venvs live under `env_cache()/envs/<key>` (`$RLVR_ENV_CACHE`, else the user's cache directory), one cache
for the task builder and every later run, so a task finds the environment it was built with.
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


def env_cache() -> Path:
    """Where environments are kept: `$RLVR_ENV_CACHE`, else `$XDG_CACHE_HOME/rlvr` (default
    `~/.cache/rlvr`)."""
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
    complete; a half-made one is removed and made again). Concurrent callers, in threads or processes, wait on
    a lock file and find it made."""
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
                 [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                  *reqs]]
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
