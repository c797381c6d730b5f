"""Framing, workspace copies that never follow links, and tmpfs sizing inside the memory limit."""
from __future__ import annotations

import os
import resource
import struct
import threading
from pathlib import Path

import pytest

from rlvr.sandbox.wire import (
    MAX_DEPTH,
    copy_in,
    copy_out,
    largest_file,
    read_exact,
    recv_frame,
    rmtree_at,
    send_frame,
    tmpfs_sizes,
)


def test_frame_round_trip_with_blobs() -> None:
    r, w = os.pipe()
    big = os.urandom(300_000)
    t = threading.Thread(target=lambda: (send_frame(w, {"a": 1, "s": "é"}, b"", big), os.close(w)))
    t.start()
    header, blobs = recv_frame(r)
    t.join()
    assert header["a"] == 1 and header["s"] == "é" and blobs == [b"", big]
    with pytest.raises(EOFError):
        recv_frame(r)


def test_truncated_frame_and_silence_are_errors() -> None:
    r, w = os.pipe()
    os.write(w, struct.pack(">II", 50, 0) + b'{"x"')
    os.close(w)
    with pytest.raises(EOFError):
        recv_frame(r)
    r2, w2 = os.pipe()
    with pytest.raises(TimeoutError):
        read_exact(r2, 4, deadline=0.0)
    os.write(w2, struct.pack(">II", 1 << 30, 0))
    with pytest.raises(ValueError):
        recv_frame(r2)


def test_blob_sizes_must_match_the_prefix() -> None:
    r, w = os.pipe()
    raw = b'{"blobs": [5]}'
    os.write(w, struct.pack(">II", len(raw), 3) + raw + b"abc")
    with pytest.raises(ValueError):
        recv_frame(r)


def test_copy_in_recreates_links_without_following(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.txt").write_text("x")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    os.symlink("/etc/shadow", src / "link")
    dst.mkdir()
    copy_in(str(src), str(dst), os.getuid(), os.getgid())
    assert (dst / "d" / "f.txt").read_text() == "x"
    assert os.readlink(dst / "link") == "/etc/shadow"
    assert os.access(dst / "run.sh", os.X_OK)


def test_copies_keep_permission_bits_but_not_setuid_or_an_unreadable_owner(tmp_path: Path) -> None:
    """A job's chmod survives the copy into the next job and back out: group and other bits stay as set,
    setuid and sticky go, and the owner can always read and write (the pool reads the workspace back)."""
    src = tmp_path / "src"
    (src / "private").mkdir(parents=True)
    modes = {"secret": 0o600, "shared": 0o664, "tool": 0o750, "locked": 0o000, "suid": 0o4755}
    for name, mode in modes.items():
        (src / name).write_text(name)
        os.chmod(src / name, mode)
    os.chmod(src / "private", 0o750)
    dst = tmp_path / "dst"
    dst.mkdir()
    copy_in(str(src), str(dst), os.getuid(), os.getgid())
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        copy_out(str(dst), parent, "out", budget=1 << 20)
    finally:
        os.close(parent)
    for root in (dst, tmp_path / "out"):
        got = {name: (root / name).stat().st_mode & 0o7777 for name in modes}
        assert got == {"secret": 0o600, "shared": 0o664, "tool": 0o750, "locked": 0o600, "suid": 0o755}
        assert (root / "private").stat().st_mode & 0o7777 == 0o750


def test_copies_keep_modification_times(tmp_path: Path) -> None:
    """`make` in one job must see which file the last job wrote last: times survive both copies."""
    src = tmp_path / "src"
    src.mkdir()
    for name, mtime in (("old.c", 1_000_000_000), ("new.o", 1_700_000_000)):
        (src / name).write_text(name)
        os.utime(src / name, ns=(mtime * 10**9 + 123, mtime * 10**9 + 456))
    dst = tmp_path / "dst"
    dst.mkdir()
    copy_in(str(src), str(dst), os.getuid(), os.getgid())
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        copy_out(str(dst), parent, "out", budget=1 << 20)
    finally:
        os.close(parent)
    for root in (dst, tmp_path / "out"):
        assert (root / "old.c").stat().st_mtime_ns == 1_000_000_000 * 10**9 + 456
        assert (root / "new.o").stat().st_mtime_ns == 1_700_000_000 * 10**9 + 456


def test_copy_out_budget_and_special_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"1" * 1000)
    (src / "b").write_bytes(b"2" * 1000)
    os.mkfifo(src / "fifo")
    os.symlink(str(tmp_path / "outside"), src / "escape")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        complete, largest = copy_out(str(src), parent, "out", budget=10_000)
        assert complete and largest == 1000
        out = tmp_path / "out"
        assert sorted(os.listdir(out)) == ["a", "b", "escape"] and not (tmp_path / "outside").exists()
        complete, _ = copy_out(str(src), parent, "small", budget=1500)
        assert not complete
        assert sum(p.stat().st_size for p in (tmp_path / "small").iterdir() if p.is_file()) <= 1500
        os.symlink(str(tmp_path / "keep"), out / "dirlink")
        (tmp_path / "keep").mkdir()
        (tmp_path / "keep" / "precious").write_text("p")
        rmtree_at(parent, "out")
        assert not out.exists() and (tmp_path / "keep" / "precious").exists()
    finally:
        os.close(parent)


def test_deep_and_wide_trees_are_walked_within_bounds(tmp_path: Path) -> None:
    """A program can nest directories past PATH_MAX and make more of them than a descriptor limit allows:
    copy-out stops at MAX_DEPTH (reported incomplete), and neither it nor rmtree_at runs out of anything."""
    src = tmp_path / "src"
    src.mkdir()
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(MAX_DEPTH + 2000):  # "dd/" * 2128 is longer than PATH_MAX: reachable by descriptor only
        os.mkdir("dd", dir_fd=fd)
        sub = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=sub), "w") as f:
            f.write("x" * 10)
        os.close(fd)
        fd = sub
    os.close(fd)
    wide = src / "wide"
    wide.mkdir()
    for i in range(600):
        (wide / f"d{i}").mkdir()
        (wide / f"d{i}" / "f").write_text("y")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = [int(fd) for fd in os.listdir("/proc/self/fd")]  # whatever the test session holds open already
    room = MAX_DEPTH * 2 + 48  # a level of copy_out costs two descriptors; 1,200 directories are on the way
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(len(used) + room, max(used) + 16), hard))
    try:
        complete, largest = copy_out(str(src), parent, "out", budget=1 << 30)
        assert not complete and largest == 10
        assert len(os.listdir(tmp_path / "out" / "wide")) == 600
        depth, d = 0, tmp_path / "out"
        while (d / "dd").is_dir():
            d, depth = d / "dd", depth + 1
        assert depth == MAX_DEPTH
        assert largest_file(str(src)) == 10
        rmtree_at(parent, "out")
        rmtree_at(parent, "src")  # the full depth, past PATH_MAX, with at most _FD_LEVELS descriptors
        assert sorted(os.listdir(tmp_path)) == []
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for name in ("out", "src"):  # never leave a tree that pytest's own recursive clean-up cannot remove
            rmtree_at(parent, name)
        os.close(parent)


@pytest.mark.parametrize("ws,mem", [(256, 512), (8, 96), (1024, 64), (1, 16), (64, 4096)])
def test_tmpfs_always_fits_inside_the_memory_limit(ws: int, mem: int) -> None:
    w, t, s = tmpfs_sizes(ws, mem)
    assert w >= 1 and t >= 1 and s >= 1
    assert w <= ws or ws < 2
    if mem >= 64:
        assert w + t + s <= mem - 16


def test_full_workspace_when_it_fits() -> None:
    assert tmpfs_sizes(256, 512)[0] == 256


def test_huge_page_collapse_keeps_memory_intact() -> None:
    import subprocess
    import sys

    code = ("import hashlib, os\nfrom rlvr.sandbox.wire import collapse_huge_pages\n"
            "data = [os.urandom(64) for _ in range(200_000)]\nbefore = "
            "hashlib.sha256(b''.join(data)).digest()\n"
            "n = collapse_huge_pages()\nassert n >= 0 and n % (1 << 21) == 0, n\n"
            "assert hashlib.sha256(b''.join(data)).digest() == before\n"
            "pid = os.fork()\nif pid == 0:\n    data[0] = b'x'\n    os._exit(0 if data[1] == "
            "data[1] else 1)\n"
            "assert os.waitpid(pid, 0)[1] == 0 and data[0] != b'x'\nprint('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
