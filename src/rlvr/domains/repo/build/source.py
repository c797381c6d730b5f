"""Where a project comes from: a local directory, a git checkout, or `pypi:NAME==VERSION` (the sdist, which
holds the tests a wheel leaves out), resolved to a directory of the project's files."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import tomllib

from rlvr.errors import UserError

PYPI = re.compile(r"^pypi:([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9._+!-]*)$")


@dataclass(frozen=True)
class Project:
    """A project's tree on the host, ready to read."""

    name: str
    """Distribution name (the directory name for a local source)."""
    version: str
    """Pinned version, or `local` / the checkout's commit."""
    root: Path
    """The directory holding the project's files (never written to)."""
    git: bool
    """Whether `root` is a git checkout with history (the revert generator needs it)."""


def resolve(source: str, cache: Path) -> Project:
    """The project named by `source`; an unreadable source is a UserError naming it."""
    m = PYPI.match(source)
    if m:
        return _from_pypi(m.group(1), m.group(2), cache)
    if source.startswith("pypi:"):
        raise UserError(f"cannot read SOURCE {source!r}", field="SOURCE", fix="write pypi:NAME==VERSION")
    root = Path(source)
    if not root.is_dir():
        raise UserError(f"cannot read SOURCE {source!r}: not a directory", field="SOURCE",
                        fix="give a project directory, a git checkout or pypi:NAME==VERSION")
    git = (root / ".git").exists()
    name, version = package_info(root) or (root.resolve().name, "local")
    if git:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=False)
        version = out.stdout.strip() or version
    return Project(name, version, root.resolve(), git)


def metadata_text(root: Path) -> str:
    """The project's core metadata as a METADATA file's text: the sdist's PKG-INFO, else pyproject.toml's
    static `[project]` name and version; "" when neither says."""
    if (root / "PKG-INFO").is_file():
        return (root / "PKG-INFO").read_text(encoding="utf-8", errors="replace")
    if (root / "pyproject.toml").is_file():
        try:
            project = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            project = {}
        if isinstance(project.get("name"), str) and isinstance(project.get("version"), str):
            return f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    return ""


def package_info(root: Path) -> tuple[str, str] | None:
    """(distribution name, version) from `metadata_text`, or None when it gives no valid pair: a local sdist
    directory builds as what its PKG-INFO says, not as `DIRNAME-local`."""
    fields = dict(line.split(": ", 1) for line in metadata_text(root).splitlines()[:40] if ": " in line)
    name, version = fields.get("Name", "").strip(), fields.get("Version", "").strip()
    if re.fullmatch(r"[A-Za-z0-9._-]+", name) and re.fullmatch(r"[A-Za-z0-9.+!_-]+", version):
        return name, version
    return None


def _from_pypi(name: str, version: str, cache: Path) -> Project:
    """Download the sdist with pip (cached under `cache/sdists`) and unpack it once."""
    where = cache / "sdists" / f"{name}-{version}"
    unpacked = where / "src"
    if not unpacked.is_dir():
        where.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                              "--disable-pip-version-check", "-q", "-d", str(where),
                              f"{name}=={version}"], capture_output=True, text=True, check=False)
        archives = [p for p in where.iterdir() if p.suffix in (".gz", ".zip")]
        if res.returncode != 0 or not archives:
            last = (res.stderr.strip().splitlines() or ["no sdist"])[-1]
            raise UserError(f"cannot read SOURCE pypi:{name}=={version}: {last[:200]}", field="SOURCE",
                            fix="check the name and version on PyPI (an sdist must exist)")
        tmp = where / "unpacking"
        shutil.rmtree(tmp, ignore_errors=True)
        _unpack(archives[0], tmp)
        tops = [p for p in tmp.iterdir() if p.is_dir()]
        (tops[0] if len(tops) == 1 else tmp).rename(unpacked)
        shutil.rmtree(tmp, ignore_errors=True)
    return Project(name, version, unpacked, False)


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest)
    else:
        with tarfile.open(archive) as t:
            t.extractall(dest, filter="data")
