"""`rlvr images`: the root-filesystem cache of task images (list, prune, build) and the offline base image."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Annotated

import typer
from rich.table import Table

from rlvr.commands.console import err, out
from rlvr.commands.console import print_json as _print_json

images_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="Task images: the unpacked-root cache, builds, the base image.")
CacheOpt = Annotated[str | None, typer.Option(
    "--cache", help="The cache directory (default: $RLVR_IMAGE_CACHE, else ~/.cache/rlvr/images).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON records instead of a table.")]


def _when(t: float | None) -> str:
    return "-" if not t else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")


def _record(root: object, cache: object) -> dict[str, object]:
    from rlvr.sandbox.imagecache import Cache, ImageRoot

    assert isinstance(root, ImageRoot) and isinstance(cache, Cache)
    return {"id": root.id, "refs": list(root.refs), "size_mb": round(root.size / 2**20, 1),
            "python": root.python_version, "shell": root.shell, "uid": root.uid, "workdir": root.workdir,
            "path": str(root.path), "unpacked": _when(root.unpacked_at),
            "last_used": _when(cache.last_used(root.id))}


@images_app.command("list")
def images_list(cache: CacheOpt = None, json_out: JsonOpt = False) -> None:
    """Every unpacked image: its ID, the references that resolved to it, size, Python, shell, user, use."""
    from rlvr.sandbox.imagecache import Cache, cache_dir

    c = Cache(cache_dir(cache))
    rows = [_record(r, c) for r in c.entries()]
    if json_out:
        _print_json(rows)
        return
    table = Table("image", "references", "MB", "python", "shell", "uid", "workdir", "last used")
    for r in rows:
        table.add_row(str(r["id"])[:12], "\n".join(r["refs"]), f"{r['size_mb']:.0f}", str(r["python"] or "-"),
                      "yes" if r["shell"] else "no", str(r["uid"]), str(r["workdir"]), str(r["last_used"]))
    out.print(table)
    out.print(f"{len(rows)} image(s) in {c.root}", highlight=False)


@images_app.command("prune")
def images_prune(cache: CacheOpt = None, everything: Annotated[bool, typer.Option(
        "--all", help="Every image not in use, not only those no reference resolves to.")] = False,
                 json_out: JsonOpt = False) -> None:
    """Remove unpacked images no reference resolves to any more (an old build of a Dockerfile), or all with
    --all; images a running pool uses stay. podman's own store is left alone (`podman image prune` cleans
    it)."""
    from rlvr.sandbox.imagecache import Cache, cache_dir, prune

    c = Cache(cache_dir(cache))
    removed = prune(c, everything)
    if json_out:
        _print_json([{"id": r.id, "refs": list(r.refs), "size_mb": round(r.size / 2**20, 1)}
                     for r in removed])
        return
    for r in removed:
        out.print(f"removed {r.id[:12]} {' '.join(r.refs)}", highlight=False)
    freed = sum(r.size for r in removed) / 2**20
    out.print(f"{len(removed)} image(s) removed, {freed:.0f} MB", highlight=False)


@images_app.command("build")
def images_build(ref: Annotated[str, typer.Argument(
        help="An image reference: dockerfile:DIR[#FILE], docker-archive:FILE, oci:DIR, oci-archive:FILE, "
             "NAME.")],
                 cache: CacheOpt = None, json_out: JsonOpt = False) -> None:
    """Build (or pull, or load) an image and unpack it into the cache, even when a cached build looks
    current."""
    from rlvr.sandbox.imagecache import Cache, cache_dir, resolve

    c = Cache(cache_dir(cache))
    t0 = time.perf_counter()
    root = resolve(ref, c, rebuild=True)
    rec = {**_record(root, c), "seconds": round(time.perf_counter() - t0, 2)}
    if json_out:
        _print_json(rec)
        return
    found = (f"python {root.python_version or 'none'}, shell {'yes' if root.shell else 'no'}, "
             f"jobs run as uid {root.uid} in {root.workdir}")
    out.print(f"{ref}: image {root.id[:12]} at {root.rootfs} ({rec['seconds']} s; {found})", highlight=False)


@images_app.command("base")
def images_base(
        suite: Annotated[str, typer.Option(help="Debian suite.")] = "bookworm",
        tag: Annotated[str, typer.Option(help="Its name in podman's store.")] = "debian:bookworm-slim",
        force: Annotated[bool, typer.Option("--force", help="Build again even when the tag exists.")] = False,
        mirror: Annotated[str | None, typer.Option(help="A Debian mirror (default deb.debian.org).")] = None,
) -> None:
    """Build Debian from Debian's own packages (mmdebstrap) and tag it in podman's local store, so `FROM
    debian:bookworm-slim` builds without a registry. Once: an existing tag is kept unless --force."""
    from rlvr.sandbox.baseimage import build_base

    t0 = time.perf_counter()
    with err.status(f"mmdebstrap {suite}", spinner="dots"):
        image_id, built = build_base(suite, tag, force=force, mirror=mirror)
    what = f"built in {time.perf_counter() - t0:.0f} s" if built else "already in the local store"
    out.print(f"{tag}: image {image_id[:12]} {what}", highlight=False)
