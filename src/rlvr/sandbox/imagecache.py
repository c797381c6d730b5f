"""The root-filesystem cache: each image unpacked once per machine, keyed by its digest, shared read-only by
every worker of every pool on the node.

Layout under `cache_dir()` (`$RLVR_IMAGE_CACHE`, else `~/.cache/rlvr/images`; never inside a clone):

    roots/<id>/rootfs/      the image's root, every layer applied (whiteouts honoured), plus empty mount
                            points rlvr binds over (/opt/rlvr, /etc/passwd, group, hosts, resolv.conf)
    roots/<id>/etc/         the /etc files rlvr synthesises for the jail (rootfs.synth_etc)
    roots/<id>/image.json   the image's config (ENV, WORKDIR, USER, ENTRYPOINT, CMD) and what rlvr found
    refs/<key>.json         a reference -> the image ID it resolved to, with a fingerprint of its sources
    locks/                  flock files: one build or pull per reference and one unpack per image at a time
                            across threads and processes; a pool holds `<id>.use` shared while it serves the
                            image, so a prune never removes a root in use
    tmp/                    unpacks in progress; a root appears under roots/ only by an atomic rename
    store.json              where podman's image index is (`store_stamp`)

The image ID is the sha256 digest of the image's config, the same whatever transport brought it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlvr.sandbox import podman, rootfs
from rlvr.sandbox.images import ImageRef, normalise, parse
from rlvr.sandbox.podman import ImageError
from rlvr.sandbox.venvs import env_cache

CACHE_ENV = "RLVR_IMAGE_CACHE"
SCHEMA = 1
"""Version of image.json and of the refs index."""


def cache_dir(override: str | Path | None = None) -> Path:
    """The cache root: `override`, else `$RLVR_IMAGE_CACHE`, else `images/` in rlvr's user cache directory."""
    if override:
        return Path(override).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return env_cache() / "images"


@dataclass(frozen=True)
class ImageRoot:
    """One unpacked image, as a worker needs it."""

    id: str
    """The image ID (sha256 of its config, hex)."""
    path: Path
    """The cache entry (`roots/<id>`)."""
    env: tuple[str, ...] = ()
    """The image's ENV, `KEY=VALUE` each."""
    workdir: str = "/workspace"
    """Where jobs run and the workspace is mounted: the image's WORKDIR when safe, else /workspace."""
    image_workdir: str = ""
    """The WORKDIR the image names (empty: none)."""
    user: str = ""
    """The USER the image names (empty: root)."""
    uid: int = rootfs.SANDBOX_UID
    """The uid jobs run as: the image's non-root user, else 65534."""
    gid: int = rootfs.SANDBOX_UID
    """The gid jobs run as."""
    python: str | None = None
    """The image's Python the zygote runs on and `python` jobs get (None: jobs are exec'd)."""
    python_version: str | None = None
    """Its version, "X.Y"."""
    shell: bool = False
    """Whether the image has /bin/sh."""
    ld_preload: bool = False
    """Whether the image has /etc/ld.so.preload (masked for rlvr's own supervisor, see image_container)."""
    entrypoint: tuple[str, ...] = ()
    """The image's ENTRYPOINT (kept for callers; jobs name their own command)."""
    cmd: tuple[str, ...] = ()
    """The image's CMD."""
    refs: tuple[str, ...] = ()
    """References that resolved to this image."""
    size: int = 0
    """Bytes of the image, as podman counts them."""
    unpacked_at: float = 0.0
    """Unix time of the unpack."""
    unpack_s: float = 0.0
    """Seconds the unpack took (copy and preparation)."""
    schema: int = SCHEMA
    """Version of image.json."""

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    @property
    def etc(self) -> Path:
        return self.path / "etc"

    def env_map(self) -> dict[str, str]:
        """The image's ENV as a mapping (later entries win, as in Docker)."""
        return dict(kv.split("=", 1) for kv in self.env if "=" in kv)

    @classmethod
    def load(cls, path: Path) -> ImageRoot:
        data = json.loads((path / "image.json").read_text())
        known = cls.__dataclass_fields__
        data = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known}
        return cls(**{**data, "path": path})

    def dump(self) -> None:
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if k != "path"}
        tmp = self.path / f".image.json.{secrets.token_hex(4)}"
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, self.path / "image.json")


@dataclass
class Cache:
    """The cache directory and its locks (see the module docstring)."""

    root: Path = field(default_factory=cache_dir)

    def __post_init__(self) -> None:
        for sub in ("roots", "refs", "locks", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @contextmanager
    def lock(self, name: str, shared: bool = False) -> Iterator[None]:
        with open(self.root / "locks" / f"{name}.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield

    def entry(self, image_id: str) -> Path:
        return self.root / "roots" / image_id

    def get(self, image_id: str) -> ImageRoot | None:
        path = self.entry(image_id)
        return ImageRoot.load(path) if (path / "image.json").is_file() else None

    def entries(self) -> list[ImageRoot]:
        roots = sorted((self.root / "roots").iterdir())
        return [ImageRoot.load(p) for p in roots if (p / "image.json").is_file()]

    def index(self) -> dict[str, dict]:
        """Every reference the cache knows: ref -> {"ref", "id", "fingerprint", "at"}."""
        out = {}
        for p in (self.root / "refs").glob("*.json"):
            try:
                rec = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            out[rec["ref"]] = rec
        return out

    def _ref_file(self, ref: str) -> Path:
        return self.root / "refs" / (hashlib.sha256(ref.encode()).hexdigest()[:32] + ".json")

    def remember(self, ref: str, image_id: str, fingerprint: str | None) -> None:
        tmp = self.root / "tmp" / f"ref.{os.getpid()}.{secrets.token_hex(4)}"
        tmp.write_text(json.dumps({"schema": SCHEMA, "ref": ref, "id": image_id, "fingerprint": fingerprint,
                                   "at": time.time()}))
        os.replace(tmp, self._ref_file(ref))

    def recall(self, ref: str) -> dict | None:
        try:
            return json.loads(self._ref_file(ref).read_text())
        except (OSError, ValueError):
            return None

    def use(self, image_id: str) -> int:
        """Hold the image as in use (a shared lock) until the returned descriptor is closed."""
        fd = os.open(self.root / "locks" / f"{image_id}.use", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(fd)  # its mtime is when the image was last used
        return fd

    def last_used(self, image_id: str) -> float | None:
        try:
            return os.stat(self.root / "locks" / f"{image_id}.use").st_mtime
        except OSError:
            return None


# ------------------------------------------------------------------------------------------- resolving
def resolve(ref: str | ImageRef, cache: Cache | None = None, *, base: str | Path | None = None,
            rebuild: bool = False) -> ImageRoot:
    """The unpacked image a reference names: built, pulled or loaded and unpacked on first use, then found in
    the cache (a Dockerfile or an archive by a fingerprint of its files, without asking podman). `rebuild`
    builds or pulls again even when the fingerprint matches. Raises ImageError (one line, exit 2) when it
    cannot be had."""
    r = (parse(ref) if isinstance(ref, str) else ref).absolute(base)
    cache = cache or Cache()
    key = str(r)
    with cache.lock("ref-" + hashlib.sha256(key.encode()).hexdigest()[:32]):
        fp = fingerprint(r, cache)
        known = cache.recall(key)
        if not rebuild and fp is not None and known and known.get("fingerprint") == fp:
            found = cache.get(known["id"])
            if found is not None:
                return found
        transient = r.local and r.transport != "dockerfile"  # an archive or a layout: loaded only to unpack
        before = podman.tags() if transient else {}
        image_id = acquire(r)
        try:
            root = unpack(cache, image_id, key)
        finally:
            if transient:
                podman.forget(image_id, before)
        cache.remember(key, image_id, fp if r.local else fingerprint(r, cache))  # a pull changed the store
        return root


def fingerprint(r: ImageRef, cache: Cache) -> str | None:
    """What a reference's image depends on, cheaply: for a Dockerfile its bytes and the context's file list
    (path, size, mtime), for an archive its size and mtime; for a store or registry reference the state of
    podman's image store (`store_stamp`: any tag, pull, build or removal changes it). None: podman must be
    asked."""
    if not r.local:
        stamp = store_stamp(cache)
        return None if stamp is None else hashlib.sha256(f"{r}\0{stamp}".encode()).hexdigest()
    h = hashlib.sha256(str(r).encode())
    target = Path(r.target)
    if r.transport == "dockerfile":
        df = _dockerfile_of(r)
        h.update(df.read_bytes())
        for dirpath, dirnames, filenames in os.walk(target):
            dirnames.sort()
            for name in sorted(filenames):
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                rel = os.path.relpath(p, target)
                h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
    else:
        _exists(r)
        for p in ([target / "index.json"] if target.is_dir() else [target]):
            st = os.stat(p)
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return h.hexdigest()


def store_stamp(cache: Cache) -> str | None:
    """The modification stamp of podman's image index (`<graph root>/<driver>-images/images.json`, which every
    tag, pull, build and removal rewrites), so a cached store reference is found without running podman. Where
    the store lives is asked of podman once and kept in the cache (`store.json`, per storage configuration);
    None when it cannot be read."""
    conf = os.environ.get("CONTAINERS_STORAGE_CONF", "")
    path = cache.root / "store.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if known.get("conf") != conf:
        fmt = "{{.Store.GraphRoot}}\t{{.Store.GraphDriverName}}"
        res = podman.run(["info", "--format", fmt], check=False)
        parts = res.stdout.strip().split("\t")
        if res.returncode != 0 or len(parts) != 2:
            return None
        known = {"conf": conf, "index": str(Path(parts[0]) / f"{parts[1]}-images" / "images.json")}
        tmp = cache.root / "tmp" / f"store.{os.getpid()}.{secrets.token_hex(4)}"
        tmp.write_text(json.dumps(known))
        os.replace(tmp, path)
    try:
        st = os.stat(known["index"])
    except OSError:
        return None
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _exists(r: ImageRef) -> None:
    target = Path(r.target)
    want_dir = r.transport in ("dockerfile", "oci")
    if not (target.is_dir() if want_dir else target.is_file()):
        what = {"dockerfile": "a build context directory", "oci": "an OCI layout directory",
                "docker-archive": "a `docker save` tarball", "oci-archive": "an OCI layout tarball"}
        raise ImageError(f"{r.transport}: not {what[r.transport]}", file=target, field="image",
                         fix=f"give the path of {what[r.transport]}")


def _dockerfile_of(r: ImageRef) -> Path:
    _exists(r)
    context = Path(r.target)
    names = [r.dockerfile] if r.dockerfile else ["Dockerfile", "Containerfile"]
    for name in names:
        if (context / name).is_file():
            return context / name
    raise ImageError(f"dockerfile: no {' or '.join(names)} in this build context", file=context,
                     field="image", fix="write dockerfile:CONTEXT_DIR#path/to/Dockerfile")


def acquire(r: ImageRef) -> str:
    """Bring the image into podman's local store; its ID."""
    if r.transport == "dockerfile":
        df = _dockerfile_of(r)
        digest = hashlib.sha256(str(r).encode()).hexdigest()[:12]
        tag = f"localhost/rlvr/{_slug(Path(r.target).name)}:{digest}"
        return podman.build(Path(r.target), df, tag)
    if r.local:
        _exists(r)
        return podman.pull(f"{r.transport}:{r.target}", what=str(r))
    found = podman.inspect(r.target)
    if found is not None:
        return found.id
    if r.transport == "containers-storage":
        raise ImageError(f"image {r.target!r} is not in the local image store", field="image",
                         fix="build it (podman build -t NAME DIR) or load it (podman load -i FILE.tar) first")
    return podman.pull("docker://" + normalise(r.target), what=repr(r.target))


def _slug(name: str) -> str:
    s = "".join(c if c.isalnum() or c in "._-" else "-" for c in name.lower()).strip("._-")
    return s[:40] or "image"


# ------------------------------------------------------------------------------------------- unpacking
def unpack(cache: Cache, image_id: str, ref: str) -> ImageRoot:
    """The cached root of an image in podman's store, unpacked once (under the image's lock) into tmp/ and
    renamed into roots/ when complete, so a failure leaves nothing there; `ref` is added to the references it
    records."""
    with cache.lock(image_id):
        found = cache.get(image_id)
        if found is None:
            found = _unpack_new(cache, image_id)
        if ref not in found.refs:
            found = ImageRoot(**{**asdict(found), "refs": (*found.refs, ref)})
            found.dump()
        return found


def _unpack_new(cache: Cache, image_id: str) -> ImageRoot:
    sweep_tmp(cache)
    info = podman.inspect(image_id)
    if info is None:
        raise ImageError(f"image {image_id[:12]} vanished from the local store while being unpacked",
                         field="image", fix="build or pull it again")
    t0 = time.perf_counter()
    tmp = cache.root / "tmp" / f"{image_id[:16]}.{os.getpid()}.{secrets.token_hex(4)}"
    tmp.mkdir()
    remove_tree(cache.entry(image_id))  # a root without its image.json: left by a crash outside this code
    try:
        merged = podman.mount(image_id)
        try:
            res = subprocess.run(["cp", "-a", "--reflink=auto", f"{merged}/.", str(tmp / "rootfs")],
                                 capture_output=True, text=True, check=False)
        finally:
            podman.unmount(image_id)
        if res.returncode != 0:
            raise ImageError(f"image {image_id[:12]} could not be unpacked: {podman.last_error(res.stderr)}",
                             field="image", fix=f"check the free space under {cache.root}")
        root = _describe(tmp, info)
        ImageRoot(**{**asdict(root), "unpack_s": time.perf_counter() - t0}).dump()
        os.rename(tmp, cache.entry(image_id))
    except BaseException:
        remove_tree(tmp)
        raise
    return ImageRoot.load(cache.entry(image_id))


def _describe(tmp: Path, info: podman.Inspected) -> ImageRoot:
    """Read what the jail needs from the unpacked root and the image's config, add the mount points, write the
    synthesised /etc files; the ImageRoot (at `tmp`, renamed by the caller)."""
    fs = tmp / "rootfs"
    config = info.config
    env = tuple(config.get("Env") or ())
    path_env = next((kv.split("=", 1)[1] for kv in reversed(env) if kv.startswith("PATH=")), None)
    try:
        uid, gid, name = rootfs.lookup_user(fs, config.get("User"))
        workdir = rootfs.workdir_of(config.get("WorkingDir"))
        rootfs.ensure_dir(fs, "/opt/rlvr")
        for f in ("passwd", "group", "hosts", "resolv.conf"):
            rootfs.ensure_file(fs, f"/etc/{f}")
        if workdir != "/workspace":
            rootfs.ensure_dir(fs, workdir)
    except rootfs.RootfsError as exc:
        names = ", ".join(info.names) or "untagged"
        raise ImageError(f"image {info.id[:12]} ({names}): {exc}", field="image",
                         fix="fix the image so that the path is a plain directory or file") from None
    rootfs.synth_etc(fs, tmp / "etc", uid, gid, name)
    python = rootfs.find_python(fs, path_env)
    return ImageRoot(id=info.id, path=tmp, env=env, workdir=workdir,
                     image_workdir=config.get("WorkingDir") or "", user=config.get("User") or "", uid=uid,
                     gid=gid, python=python[0] if python else None,
                     python_version=python[1] if python else None, shell=rootfs.has_shell(fs),
                     ld_preload=os.path.lexists(fs / "etc" / "ld.so.preload"),
                     entrypoint=tuple(config.get("Entrypoint") or ()), cmd=tuple(config.get("Cmd") or ()),
                     size=info.size, unpacked_at=time.time())


# --------------------------------------------------------------------------------------------- pruning
def remove_tree(path: Path) -> None:
    """Remove a directory tree of an image root (read-only directories included; never following links)."""
    if not os.path.lexists(path):
        return
    res = subprocess.run(["rm", "-rf", "--one-file-system", str(path)], capture_output=True, check=False)
    if res.returncode != 0 and os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def sweep_tmp(cache: Cache) -> None:
    """Remove unpacks of processes that died mid-way (their names carry their PID)."""
    for p in (cache.root / "tmp").iterdir():
        parts = p.name.split(".")
        if len(parts) >= 3 and parts[-2].isdigit() and not Path(f"/proc/{parts[-2]}").exists():
            remove_tree(p)


def prune(cache: Cache, everything: bool = False) -> list[ImageRoot]:
    """Remove cached roots that no known reference resolves to any more (a rebuilt Dockerfile's old image), or
    every root with `everything`, except roots a running pool uses; references to removed roots go too.
    Returns what was removed."""
    sweep_tmp(cache)
    index = cache.index()
    wanted = set() if everything else {rec["id"] for rec in index.values()}
    removed = []
    for root in cache.entries():
        if root.id in wanted:
            continue
        with open(cache.root / "locks" / f"{root.id}.use", "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a pool serves it
            gone = cache.root / "tmp" / f"{root.id[:16]}.del.{os.getpid()}.{secrets.token_hex(4)}"
            os.rename(root.path, gone)
            remove_tree(gone)
        removed.append(root)
    ids = {r.id for r in removed}
    for ref, rec in index.items():
        if rec["id"] in ids:
            cache._ref_file(ref).unlink(missing_ok=True)
    return removed
