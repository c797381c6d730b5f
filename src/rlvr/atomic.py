"""Files and directories that appear whole or not at all: written beside their target, then renamed into
place.

    atomic_write(path, text_or_bytes)          # readers see the old file or the whole new one
    with atomic_path(path) as tmp:             # a library writes tmp (parquet, safetensors); then it is
    `path`
        ...
    with atomic_dir(out) as tmp:               # fill tmp; it becomes `out` only if the block succeeds
        ...

Every local write of a result (a config, a summary, a report, pass rates, an export, a model directory, an
unpacked image) goes through these two, so a crash or a kill at any moment leaves nothing half-written. Remote
objects (`s3://...`) have their own atomic put in `rlvr.store.storage`, which uses `atomic_write` for local
paths.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_dir", "atomic_path", "atomic_write", "is_temporary"]


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, durable: bool = True) -> Path:
    """Write `data` (text as UTF-8) to `path` through a temporary file in the same directory and `os.replace`;
    `durable` also fsyncs the file and its directory, so the write survives a machine crash. Parents are
    created. Returns the path."""
    with atomic_path(path, durable=durable) as tmp, open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return Path(path)


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary file path beside `path` for the block to write; when the block succeeds the file
    replaces `path` (fsynced first with `durable`), else it is removed. Parents are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quiet(str(tmp))
        raise
    if durable:
        _fsync_dir(path.parent)


@contextmanager
def atomic_dir(path: str | os.PathLike[str], *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; when the block succeeds it is renamed to `path`, else
    removed. An existing `path` is an error unless it is an empty directory, or `replace` (then it is swapped
    out and removed after the rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        old = None
        if path.exists() or path.is_symlink():
            if replace:
                old = path.with_name(f".{path.name}.{os.getpid()}.old")
                os.replace(path, old)
            else:
                path.rmdir()  # only an empty directory may be replaced (OSError otherwise)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def is_temporary(name: str) -> bool:
    """Whether a file name is one of the temporaries above (a writer that died before its rename leaves
    one)."""
    return name.startswith(".") and name.endswith(".tmp")


def _fsync_dir(directory: Path) -> None:
    # The rename itself must reach the disk for the write to be durable after a machine crash.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
