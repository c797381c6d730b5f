"""Object I/O by URL on a local filesystem: atomic puts, reads, listing, deleting."""
from __future__ import annotations

import pytest

from rlvr.store import objects


def test_bytes_and_files_round_trip(tmp_path):
    url = tmp_path / "ckpt" / "step-1" / "model.bin"
    objects.put_bytes(url, b"abc")
    assert objects.get_bytes(url) == b"abc" and objects.exists(url)
    src = tmp_path / "src.bin"
    src.write_bytes(b"z" * 5000)
    objects.put_file(src, tmp_path / "ckpt" / "step-1" / "copy.bin")
    assert objects.get_file(tmp_path / "ckpt" / "step-1" / "copy.bin", tmp_path / "out.bin").read_bytes() \
        == b"z" * 5000
    assert objects.list_names(tmp_path / "ckpt" / "step-1") == ["copy.bin", "model.bin"]
    assert objects.list_names(tmp_path / "nothing") == []


def test_open_atomic_commits_on_success_and_keeps_the_old_object_on_error(tmp_path):
    url = tmp_path / "state.pt"
    with objects.open_atomic(url) as f:
        f.write(b"v1")
    with pytest.raises(RuntimeError), objects.open_atomic(url) as f:
        f.write(b"v2-partial")
        raise RuntimeError("crashed while saving")
    assert objects.get_bytes(url) == b"v1"
    with objects.open_read(url) as f:
        assert f.read() == b"v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.pt"]


def test_delete_is_quiet_for_missing_objects(tmp_path):
    objects.delete(tmp_path / "missing")
    objects.put_bytes(tmp_path / "d" / "x", b"1")
    objects.delete(tmp_path / "d")
    assert not objects.exists(tmp_path / "d" / "x")


def test_an_url_without_a_name_is_refused():
    with pytest.raises(ValueError):
        objects.put_bytes("", b"x")
