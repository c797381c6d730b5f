"""The storage layer under the store and checkpoints: fsspec URLs (local paths, `s3://`, ...) with atomic
puts."""
from __future__ import annotations

import posixpath
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from rlvr.atomic import atomic_path, atomic_write
from rlvr.errors import UserError

TEMP_DIR = "_tmp"
"""Folder (under a store's root) where objects are written before they are committed by a rename."""


def _fs_for(url: str, options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except (ImportError, ValueError) as exc:
        # A missing protocol driver (s3fs, gcsfs) or an unknown protocol is a user-side fix.
        raise UserError(f"cannot open storage URL: {exc}", field=url,
                        fix="use a local path or an fsspec URL whose driver is installed (s3:// "
                            "needs s3fs)") from None
    return fs, root.rstrip("/") or root


@dataclass
class Storage:
    """A root folder on some fsspec filesystem; every path below is relative to it, with `/` separators."""

    url: str
    """The URL or local path the storage was opened with."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec filesystem options (e.g. `endpoint_url` for an S3-compatible server)."""
    fs: fsspec.AbstractFileSystem = field(init=False)
    root: str = field(init=False)

    def __post_init__(self) -> None:
        if not str(self.url).strip():
            raise UserError("empty storage URL",
                            fix="give a run directory or an fsspec URL such as s3://bucket/run")
        self.url = str(self.url)
        self.fs, self.root = _fs_for(self.url, dict(self.options))

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, rel: str = "") -> str:
        """The filesystem path of a relative path (as the fs expects it, without protocol)."""
        rel = rel.strip("/")
        if ".." in rel.split("/"):
            raise ValueError(f"relative storage path escapes the root: {rel!r}")
        return posixpath.join(self.root, rel) if rel else self.root

    def full_url(self, rel: str = "") -> str:
        """A URL with protocol, usable by other fsspec clients (e.g. DuckDB)."""
        p = self.path(rel)
        return p if self.is_local else self.fs.unstrip_protocol(p)

    def put_bytes(self, rel: str, data: bytes) -> str:
        """Write `data` atomically: to a temporary object first, then renamed into place. Returns the path."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"put_bytes takes bytes, not {type(data).__name__}")
        final = self.path(rel)
        if self.is_local:
            return str(atomic_write(final, bytes(data)))
        tmp = self.path(f"{TEMP_DIR}/{uuid.uuid4().hex}.tmp")
        self.fs.pipe_file(tmp, data)
        # On object stores a rename is a server-side copy (itself atomic: the key appears whole) then a
        # delete.
        self.fs.mv(tmp, final)
        return final

    def put_file(self, rel: str, local_path: str | Path) -> str:
        """Copy a local file in atomically (a temporary object, then a rename)."""
        final = self.path(rel)
        if self.is_local:
            with atomic_path(final) as tmp:
                shutil.copyfile(local_path, tmp)
            return final
        tmp = self.path(f"{TEMP_DIR}/{uuid.uuid4().hex}.tmp")
        self.fs.put_file(str(local_path), tmp)
        self.fs.mv(tmp, final)
        return final

    def get_bytes(self, rel: str) -> bytes:
        return self.fs.cat_file(self.path(rel))

    def get_file(self, rel: str, local_path: str | Path) -> Path:
        local_path = Path(local_path)
        local_path.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(self.path(rel), str(local_path))
        return local_path

    def exists(self, rel: str = "") -> bool:
        return bool(self.fs.exists(self.path(rel)))

    def listdir(self, rel: str = "") -> list[str]:
        """Names (not paths) directly under `rel`; empty when it does not exist."""
        # Object-store listings are cached by fsspec: refresh, or parts other writers committed stay unseen.
        kwargs = {} if self.is_local else {"refresh": True}
        try:
            entries = self.fs.ls(self.path(rel), detail=False, **kwargs)
        except FileNotFoundError:
            return []
        return sorted(posixpath.basename(str(e).rstrip("/")) for e in entries)

    def delete(self, rel: str, recursive: bool = False) -> None:
        try:
            self.fs.rm(self.path(rel), recursive=recursive)
        except FileNotFoundError:
            pass

    def open(self, rel: str, mode: str = "rb") -> Any:
        return self.fs.open(self.path(rel), mode)
