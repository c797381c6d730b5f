"""Host-side workspace access never follows links a sandboxed program planted."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlvr.sandbox.workspace import list_files, read_file, read_files, write_files


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    write_files(tmp_path, {"a/b/c.txt": "x", "bin.dat": b"\xff\x00"})
    assert read_files(tmp_path) == {"a/b/c.txt": "x", "bin.dat": "\ufffd\x00"}
    assert read_file(tmp_path, "bin.dat") == b"\xff\x00"


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "", "a//b"])
def test_unsafe_paths_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        write_files(tmp_path, {bad: "x"})
    assert read_file(tmp_path, bad) is None


def test_symlinked_directories_and_files_are_not_followed(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    os.symlink(outside, ws / "d")
    os.symlink(outside / "secret", ws / "f")
    with pytest.raises(ValueError):
        write_files(ws, {"d/new": "x"})
    assert not (outside / "new").exists()
    assert read_file(ws, "d/secret") is None and read_file(ws, "f") is None
    assert list_files(ws) == []
    write_files(ws, {"f": "mine"})  # a link in the way is replaced, its target untouched
    assert (outside / "secret").read_text() == "s" and read_file(ws, "f") == b"mine"


def test_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p")
    assert read_file(tmp_path, "p") is None and list_files(tmp_path) == []


def test_directory_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError):
        write_files(tmp_path, {"d": "x"})
