"""Object I/O by URL: put and get bytes or files at a local path or any fsspec URL, atomically; list, delete.

Each call names one object by its full URL (a Storage is opened at its parent, so atomic puts land beside
it). Checkpoints are written with `with open_atomic(url) as f: torch.save(state, f)`; nothing here imports
torch. Which URLs a run uses is rlvr.store.layout's business.
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from rlvr.atomic import is_temporary
from rlvr.store.storage import TEMP_DIR, Storage

Options = dict[str, Any] | None
"""fsspec filesystem options, as in `[store] storage_options` (e.g. `endpoint_url`)."""


def _split(url: str | Path, options: Options = None) -> tuple[Storage, str]:
    """A Storage at the URL's parent and the object's name (so atomic puts land beside it)."""
    url = str(url).rstrip("/")
    parent, name = posixpath.split(url)
    if not name:
        raise ValueError(f"object URL has no object name: {url!r}")
    return Storage(parent or ".", dict(options or {})), name


def put_bytes(url: str | Path, data: bytes, options: Options = None) -> str:
    """Write bytes to `url` atomically (temporary object, then rename)."""
    storage, name = _split(url, options)
    return storage.put_bytes(name, data)


def get_bytes(url: str | Path, options: Options = None) -> bytes:
    """Read the whole object at `url`."""
    storage, name = _split(url, options)
    return storage.get_bytes(name)


def put_file(local_path: str | Path, url: str | Path, options: Options = None) -> str:
    """Upload (or copy) a local file to `url` atomically."""
    storage, name = _split(url, options)
    return storage.put_file(name, local_path)


def get_file(url: str | Path, local_path: str | Path, options: Options = None) -> Path:
    """Download (or copy) the object at `url` to a local file."""
    storage, name = _split(url, options)
    return storage.get_file(name, local_path)


def exists(url: str | Path, options: Options = None) -> bool:
    """Whether an object (or folder) is at `url`."""
    storage, name = _split(url, options)
    return storage.exists(name)


def delete(url: str | Path, options: Options = None) -> None:
    """Remove an object or a folder of objects; a missing one is not an error."""
    storage, name = _split(url, options)
    storage.delete(name, recursive=True)


def list_names(url: str | Path, options: Options = None) -> list[str]:
    """Names directly under a folder URL (empty when it does not exist)."""
    return [n for n in Storage(str(url), dict(options or {})).listdir() if n != TEMP_DIR
            and not is_temporary(n)]


@contextlib.contextmanager
def open_atomic(url: str | Path, options: Options = None) -> Iterator[BinaryIO]:
    """A local temporary file to write into; on a clean exit it is committed to `url`, on an error dropped."""
    fd, tmp = tempfile.mkstemp(prefix="rlvr-object-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        put_file(tmp, url, options)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def open_read(url: str | Path, options: Options = None) -> Iterator[BinaryIO]:
    """A readable binary file of the object at `url` (seekable, so torch.load can use it)."""
    storage, name = _split(url, options)
    with storage.open(name, "rb") as f:
        yield f
