"""RunLayout: every path of a run, step names read back (malformed ones ignored), dropping what a resumed run
replays, starting over; at a local path and at an fsspec URL."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.store import EpisodeStore, RunLayout, objects
from rlvr.store.layout import (
    heldout_label,
    parse_checkpoint_name,
    parse_heldout_label,
    parse_step_dir,
    step_dir,
)
from tests.store.synthetic import episode


@pytest.fixture
def memory_root():
    root = f"memory://rlvr-layout-{uuid.uuid4().hex[:8]}/run"
    yield root
    objects.delete(root)


def test_the_paths_of_a_run_are_the_on_disk_layout(tmp_path: Path) -> None:
    run = RunLayout(tmp_path)
    assert (run.config, run.summary, run.pass_rates, run.metrics, run.alerts, run.report, run.model,
            run.tensorboard, run.export("recovery")) == (
        tmp_path / "config.toml", tmp_path / "summary.json", tmp_path / "pass_rates.json",
        tmp_path / "metrics.jsonl",
        tmp_path / "alerts.jsonl", tmp_path / "report.html", tmp_path / "model", tmp_path / "tensorboard",
        tmp_path / "recovery.jsonl")
    assert run.checkpoint(12) == f"{tmp_path}/checkpoints/step-000012.pt"
    assert run.latest == f"{tmp_path}/checkpoints/latest"
    assert run.partition(42) == f"{tmp_path}/episodes/step=00000042"
    assert run.heldout_store("before") == f"{tmp_path}/heldout/before"
    assert heldout_label(5) == "step-5" and step_dir(0) == "step=00000000"


def test_a_store_url_names_records_but_has_no_run_directory() -> None:
    run = RunLayout("s3://bucket/exp/")
    assert run.root == "s3://bucket/exp" and run == RunLayout("s3://bucket/exp")
    assert run.checkpoint(3) == "s3://bucket/exp/checkpoints/step-000003.pt"
    assert run.partition(3) == "s3://bucket/exp/episodes/step=00000003"
    assert run.heldout == "s3://bucket/exp/heldout"
    with pytest.raises(UserError, match="local path"):
        _ = run.config


def test_the_episode_store_writes_where_the_layout_says(tmp_path: Path) -> None:
    EpisodeStore(tmp_path).write(7, [episode(7, "t")])
    assert Path(RunLayout(tmp_path).partition(7)).is_dir()


@pytest.mark.parametrize(("name", "step"), [
    ("step=00000012", 12), ("step=12", 12), ("step=0", 0),
    ("step=", None), ("step=-1", None), ("step=1a", None), ("step=\u0661\u0662", None), ("xstep=1", None),
    ("step=1/", None), ("step-000001.pt", None), ("_tmp", None), (".tmp-abc.part", None),
])
def test_partition_names_parse_and_malformed_ones_are_none(name: str, step: int | None) -> None:
    assert parse_step_dir(name) == step


@pytest.mark.parametrize(("name", "step"), [
    ("step-000012.pt", 12), ("step-1234567.pt", 1234567),
    ("latest", None), ("step-000012.pt.part", None), ("step-.pt", None), ("step=000012", None),
    ("step-12", None),
])
def test_checkpoint_names_parse_and_malformed_ones_are_none(name: str, step: int | None) -> None:
    assert parse_checkpoint_name(name) == step


def test_heldout_labels_parse() -> None:
    assert parse_heldout_label(heldout_label(30)) == 30
    assert [parse_heldout_label(x) for x in ("before", "after", "step-", "step=3")] == [None] * 4


def _populate(run: RunLayout) -> None:
    """Checkpoints after 2, 3 and 4 steps (4 never made `latest`), partitions 0-4, held-out stores, and
    junk."""
    for step in (2, 3, 4):
        objects.put_bytes(run.checkpoint(step), b"state")
    objects.put_bytes(run.latest, b"3")
    for step in range(5):
        EpisodeStore(run.root).write(step, [episode(step, f"t{step}")])
    for label in ("before", heldout_label(2), heldout_label(3), heldout_label(4), "after", "custom"):
        EpisodeStore(run.heldout_store(label)).write(0, [episode(0, "h")])
    objects.put_bytes(run.join("episodes", "step=notanumber", "x"), b"junk")
    objects.put_bytes(run.join("checkpoints", "notes.txt"), b"junk")


@pytest.mark.parametrize("where", ["local", "memory"])
def test_drop_after_removes_what_a_resumed_run_records_again(where: str, tmp_path: Path,
                                                             memory_root: str) -> None:
    run = RunLayout(tmp_path / "run" if where == "local" else memory_root)
    _populate(run)
    assert run.checkpoint_steps() == [2, 3, 4] and run.episode_steps() == [0, 1, 2, 3, 4]
    run.drop_after(3)
    assert run.checkpoint_steps() == [2, 3]
    assert run.episode_steps() == [0, 1, 2] and EpisodeStore(run.root).steps() == [0, 1, 2]
    assert sorted(run.heldout_labels()) == ["before", "custom", "step-2", "step-3"]
    assert objects.get_bytes(run.latest) == b"3"
    assert objects.exists(run.join("episodes", "step=notanumber", "x"))
    assert objects.exists(run.join("checkpoints", "notes.txt"))


def test_drop_after_on_an_empty_run_is_quiet(tmp_path: Path) -> None:
    RunLayout(tmp_path / "nothing").drop_after(0)


def test_prune_keeps_the_newest_checkpoints_by_step(tmp_path: Path) -> None:
    run = RunLayout(tmp_path)
    for step in (9, 10, 100, 2):
        objects.put_bytes(run.checkpoint(step), b"s")
    run.prune_checkpoints(2)
    assert run.checkpoint_steps() == [10, 100]
    assert sorted(objects.list_names(run.checkpoints)) == ["step-000010.pt", "step-000100.pt"]


def test_start_over_clears_the_run_directory_and_a_separate_store(tmp_path: Path, memory_root: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    RunLayout(run_dir).config.write_text('name = "run"\n')
    (run_dir / "marker").write_text("old")
    records = RunLayout(memory_root)
    _populate(records)
    RunLayout(run_dir).start_over(records=records)
    assert not run_dir.exists()
    assert all(objects.list_names(records.join(sub)) == [] for sub in ("checkpoints", "episodes", "heldout"))
    RunLayout(tmp_path / "never-made").start_over(records=RunLayout(tmp_path / "never-made"))


def test_start_over_with_records_in_the_run_directory(tmp_path: Path) -> None:
    run = RunLayout(tmp_path / "run")
    _populate(run)
    run.config.write_text('name = "run"\n')
    run.start_over(records=RunLayout(f"{tmp_path}/run/"))
    assert not run.dir.exists()


def test_start_over_refuses_a_directory_that_is_not_a_run(tmp_path: Path, memory_root: str) -> None:
    (tmp_path / "thesis.tex").write_text("do not delete")
    records = RunLayout(memory_root)
    objects.put_bytes(records.checkpoint(1), b"s")
    with pytest.raises(UserError, match="not an rlvr run"):
        RunLayout(tmp_path).start_over(records=records)
    assert (tmp_path / "thesis.tex").exists() and records.checkpoint_steps() == [1]
