"""The Python packages an exported Harbor task installs, packed from this very installation.

An exported task's verifier runs rlvr's own verifier inside its image, and its agent's environment runs the
task's programs: both need Python packages. They are taken from the environment doing the export, file for
file (each distribution's installed files, its dist-info included: rlvr's domain entry points among them), as
one zip that the image unpacks into a venv's site-packages. No network, no registry, and the verifier runs the
exact versions that judged the task here. The packed files are those of this Python (3.11 for rlvr, which is
Debian bookworm's): a compiled module (pydantic-core's) needs the same Python and architecture in the image,
which the image's build checks by importing it.

Which distributions: rlvr itself and what its verify layer imports (`JUDGE`) for the verifier; for both, what
a task's judging imports (its domains' `needs`, as distributions, and `Domain.requirements`) and its own
`requirements` (`export.plan` gathers them); every dependency of those, as their installed metadata says. A
task's own requirements come from where its sandbox gets them: this environment when it has them all, else
the venv rlvr made for them (`rlvr.sandbox.venvs`, made now when it is missing), which is searched first.
"""
from __future__ import annotations

import functools
import importlib.metadata as md
import io
import re
import sys
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from rlvr.errors import UserError

JUDGE = ("pydantic", "tomli-w", "packaging")
"""What rlvr's verify layer imports beyond the standard library (the judge runs with these and nothing else of
rlvr's core dependencies)."""
SKIPPED = ("__pycache__",)
_STAMP = (1980, 1, 1, 0, 0, 0)
"""Every zip entry's time: the same packages give the same bytes (podman's layer cache then holds)."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(names: Iterable[str], shallow: Iterable[str] = ("rlvr",),
            paths: Sequence[str] = ()) -> list[md.Distribution]:
    """The installed distributions `names` name, with every dependency their metadata lists (markers
    evaluated here, no extras), sorted by name; a name not installed is one UserError. The dependencies of
    `shallow` ones are not followed (rlvr's core dependencies serve training; the judge needs `JUDGE`).
    `paths`: site directories searched before this environment's."""
    shallow = {_canonical(n) for n in shallow}
    found: dict[str, md.Distribution] = {}
    todo = [Requirement(n) if isinstance(n, str) else n for n in names]
    while todo:
        req = todo.pop()
        key = _canonical(req.name)
        if key in found:
            continue
        try:
            dist = next(iter(md.distributions(name=req.name, path=[*paths, *sys.path])))
        except StopIteration:
            raise UserError(f"the package {req.name!r} an exported task needs is not installed here",
                            field="requirements", fix=f"pip install {req.name} where you export") from None
        found[key] = dist
        for text in () if key in shallow else dist.requires or ():
            try:
                dep = Requirement(text)
            except InvalidRequirement:
                continue
            if dep.marker is None or dep.marker.evaluate({"extra": ""}):
                todo.append(dep)
    return [found[k] for k in sorted(found)]


def _installed_files(dist: md.Distribution) -> list[tuple[str, Path]]:
    """(path in site-packages, file) of a distribution, scripts and caches left out. An editable install
    (rlvr in a checkout) lists only its metadata: its top-level packages are found by import."""
    out: list[tuple[str, Path]] = []
    for f in dist.files or ():
        rel = str(f)
        if rel.startswith("..") or any(part in SKIPPED for part in Path(rel).parts):
            continue
        if rel.endswith((".pth", "direct_url.json")) or "__editable__" in rel:
            continue
        path = Path(str(f.locate()))
        if path.is_file():
            out.append((rel, path))
    if not any(not rel.split("/")[0].endswith(".dist-info") for rel, _ in out):
        out += _package_files(dist)
    return out


def _package_files(dist: md.Distribution) -> list[tuple[str, Path]]:
    """The files of an editable distribution's top-level modules, found without importing them."""
    import importlib.util

    tops = (dist.read_text("top_level.txt") or "").split() or [dist.metadata["Name"].replace("-", "_")]
    out: list[tuple[str, Path]] = []
    for top in tops:
        spec = importlib.util.find_spec(top)
        if spec is None or spec.origin is None:
            continue
        if not spec.submodule_search_locations:  # a module of one file
            out.append((Path(spec.origin).name, Path(spec.origin)))
            continue
        root = Path(spec.origin).parent
        out += [(f"{top}/{p.relative_to(root).as_posix()}", p) for p in sorted(root.rglob("*"))
                if p.is_file() and not any(part in SKIPPED for part in p.relative_to(root).parts)]
    return out


def requirements_site(requirements: Sequence[str]) -> tuple[str, ...]:
    """The site directory of the venv that serves a task's `requirements` (none when this environment has them
    all), made now when it is missing."""
    from rlvr.sandbox import venvs

    if not requirements or venvs.satisfied(requirements, sys.executable):
        return ()
    try:
        python = venvs.ensure_env(list(requirements), venvs.env_cache())
    except venvs.EnvError as exc:
        raise UserError(f"the task's requirements do not install: {exc}", field="requirements",
                        fix="pin versions that exist for this Python") from None
    return (str(python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" /
                "site-packages"),)


def site_zip(requirements: Iterable[str], *, rlvr: bool, paths: Sequence[str] = ()) -> bytes:
    """One zip of the installed files of `requirements` (and of rlvr and `JUDGE` with `rlvr`) with their
    dependencies, looked up in `paths` first: unzipped into site-packages, they are installed. Made once per
    process and set of packages (an export of many tasks packs each set once)."""
    return _site_zip(tuple(sorted(set(requirements))), rlvr, tuple(paths))


@functools.lru_cache(maxsize=8)
def _site_zip(requirements: tuple[str, ...], rlvr: bool, paths: tuple[str, ...]) -> bytes:
    names = [*requirements, *(["rlvr", *JUDGE] if rlvr else [])]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        seen: set[str] = set()
        for dist in closure(names, paths=paths):
            if _canonical(dist.metadata["Name"]) == "rlvr" and not rlvr:
                continue
            for rel, path in _installed_files(dist):
                if rel not in seen:
                    seen.add(rel)
                    info = zipfile.ZipInfo(rel, _STAMP)
                    info.external_attr = (path.stat().st_mode & 0o777) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    zf.writestr(info, path.read_bytes())
    return buf.getvalue()
