"""Files and directories that appear whole or not at all: written beside their target, then renamed into place.

    atomic_write(path, text_or_bytes)          # readers see the old file or the whole new one
    with atomic_dir(out) as tmp:               # fill tmp; it becomes `out` only if the block succeeds
        ...

Every local write of a result (a config, a summary, a report, pass rates, an export, a model directory, an
unpacked image) goes through these two, so a crash or a kill at any moment leaves nothing half-written. Remote
objects (`s3://...`) have their own atomic put in `rlvr.store.storage`, which uses `atomic_write` for local paths.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_dir", "atomic_write"]


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, durable: bool = True) -> Path:
    """Write `data` (text as UTF-8) to `path` through a temporary file in the same directory and `os.replace`;
    `durable` also fsyncs the file and its directory, so the write survives a machine crash. Parents are
    created. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)
    return path


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
