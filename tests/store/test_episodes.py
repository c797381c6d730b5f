"""EpisodeStore: Parquet by step, atomic commits (a writer killed mid-write), reads, and run resolution."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.errors import UserError
from rlvr.rollout.episode import Episode
from rlvr.store import EpisodeStore, open_run
from tests.store.synthetic import episode

ROOT = Path(__file__).resolve().parents[2]


def test_write_read_steps_and_episodes(tmp_path):
    store = EpisodeStore(tmp_path / "run")
    a = [episode(0, "t0", sample=i, reward=i / 3) for i in range(3)]
    b = [episode(2, "t1", sample=i) for i in range(2)]
    path = store.write(0, a)
    store.write(2, b)
    assert path is not None and path.endswith(".parquet") and "step=00000000" in path
    assert store.steps() == [0, 2]
    assert store.read().num_rows == 5
    assert store.episodes(steps=[2]) == b
    assert store.episodes() == a + b
    assert store.read(columns=["reward"]).column_names == ["reward"]


def test_rewriting_a_step_keeps_the_newest_row_per_episode(tmp_path):
    store = EpisodeStore(tmp_path)
    ep = episode(1, "t", reward=0.0)
    store.write(1, [ep])
    store.write(1, [ep.model_copy(update={"reward": 1.0}), episode(1, "u")])
    rows = store.read().to_pylist()
    assert len(rows) == 2
    assert next(r for r in rows if r["episode_id"] == ep.episode_id)["reward"] == 1.0


def test_the_partition_sets_the_step(tmp_path):
    store = EpisodeStore(tmp_path)
    store.write(7, [Episode(task_id="t", domain="d")])
    assert store.episodes()[0].step == 7


@pytest.mark.parametrize("step", [-1, 1.5, "3", True])
def test_bad_steps_are_refused(tmp_path, step):
    with pytest.raises(ValueError):
        EpisodeStore(tmp_path).write(step, [Episode(task_id="t", domain="d")])


def test_empty_batches_and_wrong_records(tmp_path):
    store = EpisodeStore(tmp_path)
    assert store.write(0, []) is None and store.steps() == []
    with pytest.raises(TypeError):
        store.write(0, [{"task_id": "t"}])  # type: ignore[list-item]
    assert store.read().num_rows == 0 and store.episodes() == []


def test_unknown_column_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="unknown episode column 'rewardd'"):
        EpisodeStore(tmp_path).read(columns=["rewardd"])


def test_foreign_files_and_torn_temporaries_are_ignored(tmp_path):
    store = EpisodeStore(tmp_path)
    store.write(1, [episode(1, "t")])
    step_dir = tmp_path / "episodes" / "step=00000001"
    (step_dir / ".part-00001.parquet.abc.tmp").write_bytes(b"PAR1 torn")
    (step_dir / "notes.txt").write_text("hello")
    (tmp_path / "episodes" / "step=oops").mkdir()
    (tmp_path / "episodes" / "README").write_text("x")
    assert store.steps() == [1] and store.read().num_rows == 1
    assert store.clean_temp() == 1 and not (step_dir / ".part-00001.parquet.abc.tmp").exists()


def test_parts_from_an_older_schema_read_with_nulls(tmp_path):
    store = EpisodeStore(tmp_path)
    step_dir = tmp_path / "episodes" / "step=00000004"
    step_dir.mkdir(parents=True)
    old = pa.table({"episode_id": ["old1"], "step": [4], "task_id": ["t"], "domain": ["d"], "reward": [0.5]})
    pq.write_table(old, step_dir / "part-00000000000000000001-abcdef.parquet")
    store.write(5, [episode(5, "t")])
    table = store.read()
    assert table.num_rows == 2
    row = table.filter(pa.compute.equal(table["episode_id"], "old1")).to_pylist()[0]
    assert row["reward"] == 0.5 and row["messages_json"] is None
    assert store.episodes(steps=[4])[0].reward == 0.5


# A writer that commits steps one after another and says so; at step 3 it stops, inside the write, after the
# temporary part is complete but before it is renamed into place, and waits to be killed.
_WRITER = """
import os, sys, time
sys.path.insert(0, {root!r})
import rlvr.atomic as atomic
from rlvr.store import EpisodeStore
from tests.store.synthetic import episode
store = EpisodeStore({url!r})
real_fsync = os.fsync
def fsync(fd):
    if CURRENT == {stop_at}:
        print("MIDWRITE", flush=True)
        time.sleep(60)
    real_fsync(fd)
atomic.os.fsync = fsync
for CURRENT in range(100):
    store.write(CURRENT, [episode(CURRENT, "t%d" % i, sample=i, length=2000) for i in range(20)])
    print("ACK", CURRENT, flush=True)
"""


def _spawn(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)


def test_writer_killed_mid_write_loses_nothing_acknowledged(tmp_path):
    url = str(tmp_path / "run")
    proc = _spawn(_WRITER.format(root=str(ROOT), url=url, stop_at=3))
    acked = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("ACK"):
                acked.append(int(line.split()[1]))
            if line.startswith("MIDWRITE"):
                break
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert acked == [0, 1, 2]
    temps = list((tmp_path / "run" / "episodes").rglob(".*.tmp"))
    assert temps, "the kill should have left the uncommitted temporary behind"
    store = EpisodeStore(url)
    assert store.steps() == [0, 1, 2]
    assert store.read().num_rows == 60
    assert all(len(e.token_ids) == 2010 for e in store.episodes(steps=[2]))
    store.write(3, [episode(3, "again")])
    assert store.steps() == [0, 1, 2, 3]


def test_writer_killed_at_a_random_moment_keeps_every_acknowledged_step(tmp_path):
    url = str(tmp_path / "run")
    proc = _spawn(_WRITER.format(root=str(ROOT), url=url, stop_at=-1))
    acked = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("ACK"):
                acked.append(int(line.split()[1]))
                if len(acked) == 4:
                    time.sleep(0.013)  # somewhere inside the next write
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
    finally:
        proc.wait(timeout=30)
    store = EpisodeStore(url)
    steps = store.steps()
    assert steps[: len(acked)] == acked
    for s in steps:
        assert store.read(steps=[s]).num_rows == 20


def test_open_run_follows_the_configured_store_url(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    elsewhere = tmp_path / "bucket" / "run"
    (run / "config.toml").write_text(f'name = "run"\n[store]\nurl = "{elsewhere}"\n')
    EpisodeStore(elsewhere).write(0, [episode(0, "t")])
    assert open_run(run).steps() == [0]
    assert open_run(tmp_path / "bucket" / "run").url == str(elsewhere)


def test_open_run_errors_name_the_file(tmp_path):
    with pytest.raises(UserError, match="no such run directory"):
        open_run(tmp_path / "missing")
    (tmp_path / "config.toml").write_text("name = [")
    with pytest.raises(UserError, match="config.toml"):
        open_run(tmp_path)


def test_a_damaged_part_is_named_in_the_error(tmp_path, cli):
    store = EpisodeStore(tmp_path)
    store.write(0, [episode(0, "t")])
    bad = tmp_path / "episodes" / "step=00000001" / "part-00000000000000000002-abcdef.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(UserError, match="unreadable episode part") as err:
        store.read()
    assert str(bad) in str(err.value)
    res = cli(["failures", str(tmp_path)])
    assert res.code == 2 and "move the damaged part" in res.stderr
    assert store.read(steps=[0]).num_rows == 1
