"""Where everything of a run lives: the one module that spells the names of a run's files and folders.

    <run_dir>/                  local: the resolved config, the monitor's records, the final model
        config.toml  summary.json  pass_rates.json  metrics.jsonl  alerts.jsonl  report.html
        model/  tensorboard/  <export>.jsonl
    <records>/                  the run directory, or `[store] url` when set (any fsspec URL)
        checkpoints/step-000012.pt  checkpoints/latest      one rank: one torch file
        checkpoints/step-000012.dcp/.metadata  __<rank>_0.distcp  run.pt      several: each rank's shards
        episodes/step=00000012/part-<unix-ns>-<random>.parquet
        heldout/<label>/episodes/step=00000000/...      label: before, step-<n>, after

Step numbers count steps done: the checkpoint `step-000012.pt` (or `.dcp`) and the held-out label `step-12`
are taken after 12 steps, while the episode partition `step=00000012` holds the episodes of the 13th (index
12).
"""
from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import UserError
from rlvr.store import objects

CONFIG_FILE = "config.toml"
SUMMARY_FILE = "summary.json"
PASS_RATES_FILE = "pass_rates.json"
METRICS_FILE = "metrics.jsonl"
"""One line per logged step: {"step", "time", "metrics"}; the report reads it."""
ALERTS_FILE = "alerts.jsonl"
"""One alert a line (see rlvr.monitor.detectors.Alert)."""
REPORT_FILE = "report.html"
MODEL_DIR = "model"
"""The final model and tokenizer (loadable with `hf:<run_dir>/model`)."""
TENSORBOARD_DIR = "tensorboard"

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest"
"""The step of the last complete checkpoint, as decimal text (written after the checkpoint itself)."""
SHARDED_STATE_FILE = "run.pt"
"""Beside a sharded checkpoint's tensors: what is not a weight or optimizer tensor (step, RNG states, ...)."""
EPISODES_DIR = "episodes"
HELDOUT_DIR = "heldout"
RECORD_DIRS = (CHECKPOINTS_DIR, EPISODES_DIR, HELDOUT_DIR)
"""Everything a run records at its store URL."""

HELDOUT_BEFORE = "before"
HELDOUT_AFTER = "after"

_STEP_DIR = re.compile(r"step=([0-9]+)")
_CHECKPOINT = re.compile(r"step-([0-9]+)\.(?:pt|dcp)")
_HELDOUT_STEP = re.compile(r"step-([0-9]+)")


def step_dir(step: int) -> str:
    """The episode partition of a step: `step=00000042`."""
    return f"step={step:08d}"


def checkpoint_name(step: int, sharded: bool = False) -> str:
    """The checkpoint after `step` steps: the file `step-000042.pt`, or the folder of a sharded one
    (torch.distributed.checkpoint) `step-000042.dcp`."""
    return f"step-{step:06d}.{'dcp' if sharded else 'pt'}"


def heldout_label(step: int) -> str:
    """The held-out measurement taken after `step` steps, between `before` and `after`: `step-42`."""
    return f"step-{step}"


def _parse(pattern: re.Pattern[str], name: str) -> int | None:
    m = pattern.fullmatch(name)
    return int(m.group(1)) if m else None


def parse_step_dir(name: str) -> int | None:
    """The step of an episode partition's name; None for any other name."""
    return _parse(_STEP_DIR, name)


def parse_checkpoint_name(name: str) -> int | None:
    """The step of a checkpoint's name (file or sharded folder); None for any other name (the `latest`
    pointer, temporaries)."""
    return _parse(_CHECKPOINT, name)


def parse_heldout_label(label: str) -> int | None:
    """The step of a `step-<n>` held-out label; None for `before`, `after` and any other name."""
    return _parse(_HELDOUT_STEP, label)


@dataclass(frozen=True, init=False)
class RunLayout:
    """The paths of one run under `root`; the methods that list and delete records work at any fsspec URL."""

    root: str
    """A local run directory, or the URL its records are kept at (`s3://bucket/run`); no trailing `/`."""
    options: dict[str, Any] | None = field(default=None, compare=False)
    """fsspec filesystem options for the records, as in `[store] storage_options`."""

    def __init__(self, root: str | Path, options: dict[str, Any] | None = None) -> None:
        text = str(root)
        object.__setattr__(self, "root", text.rstrip("/") or text)
        object.__setattr__(self, "options", options)

    def join(self, *names: str) -> str:
        return "/".join((self.root, *names))

    # ------------------------------------------------------------------------------- the run directory
    @property
    def dir(self) -> Path:
        """The run directory; its files are written where the trainer runs, so it is always local."""
        if "://" in self.root:
            raise UserError("a run directory is a local path, not a URL", field=self.root,
                            fix="give the run directory; only [store] url may be a URL")
        return Path(self.root)

    @property
    def config(self) -> Path:
        return self.dir / CONFIG_FILE

    @property
    def summary(self) -> Path:
        return self.dir / SUMMARY_FILE

    @property
    def pass_rates(self) -> Path:
        return self.dir / PASS_RATES_FILE

    @property
    def metrics(self) -> Path:
        return self.dir / METRICS_FILE

    @property
    def alerts(self) -> Path:
        return self.dir / ALERTS_FILE

    @property
    def report(self) -> Path:
        return self.dir / REPORT_FILE

    @property
    def model(self) -> Path:
        return self.dir / MODEL_DIR

    @property
    def tensorboard(self) -> Path:
        return self.dir / TENSORBOARD_DIR

    @property
    def frames(self) -> Path:
        """Where verifiers keep the frames they render of episodes (`VerifyContext.extras["frames_dir"]`, e.g.
        the blender verifier's; the report shows them beside the reference's)."""
        return self.dir / "frames"

    def export(self, name: str) -> Path:
        """Where `rlvr failures --export NAME` writes by default."""
        return self.dir / f"{name}.jsonl"

    # ---------------------------------------------------------------------------------------- records
    @property
    def checkpoints(self) -> str:
        return self.join(CHECKPOINTS_DIR)

    def checkpoint(self, step: int, sharded: bool = False) -> str:
        """The checkpoint file after `step` steps, or with `sharded` the folder of its shards."""
        return self.join(CHECKPOINTS_DIR, checkpoint_name(step, sharded))

    def sharded_state(self, step: int) -> str:
        """The run state written beside the shards of the sharded checkpoint after `step` steps."""
        return self.join(CHECKPOINTS_DIR, checkpoint_name(step, sharded=True), SHARDED_STATE_FILE)

    @property
    def latest(self) -> str:
        """The pointer to the last complete checkpoint."""
        return self.join(CHECKPOINTS_DIR, LATEST_FILE)

    @property
    def episodes(self) -> str:
        return self.join(EPISODES_DIR)

    def partition(self, step: int) -> str:
        """The folder of one step's episode parts."""
        return self.join(EPISODES_DIR, step_dir(step))

    @property
    def heldout(self) -> str:
        return self.join(HELDOUT_DIR)

    def heldout_store(self, label: str) -> str:
        """The root of the episode store of one held-out measurement."""
        return self.join(HELDOUT_DIR, label)

    # ---------------------------------------------------------------------------------------- listing
    def _names(self, folder: str, parse: Callable[[str], int | None]) -> dict[int, str]:
        """Step -> the stored name, for the names under `folder` that `parse` reads (others are ignored)."""
        found = {}
        for name in objects.list_names(self.join(folder), self.options):
            step = parse(name)
            if step is not None:
                found[step] = name
        return dict(sorted(found.items()))

    def checkpoint_steps(self) -> list[int]:
        """Steps with a checkpoint file or folder, ascending (complete or not: `latest` says which is
        whole)."""
        return list(self._names(CHECKPOINTS_DIR, parse_checkpoint_name))

    def episode_steps(self) -> list[int]:
        """Steps with an episode partition folder, ascending."""
        return list(self._names(EPISODES_DIR, parse_step_dir))

    def heldout_labels(self) -> list[str]:
        """Labels of the stored held-out measurements."""
        return objects.list_names(self.heldout, self.options)

    # ----------------------------------------------------------------------------------------- upkeep
    def prune_checkpoints(self, keep: int) -> None:
        """Delete all but the `keep` newest checkpoints (files or sharded folders)."""
        names = list(self._names(CHECKPOINTS_DIR, parse_checkpoint_name).values())
        for name in names[:-keep] if keep > 0 else names:
            objects.delete(self.join(CHECKPOINTS_DIR, name), self.options)

    def drop_after(self, step: int) -> None:
        """Delete what the run recorded after its checkpoint at `step`, which a resumed run records again:
        checkpoints of later steps, episode partitions from index `step` on, later and final held-out
        stores."""
        for later, name in self._names(CHECKPOINTS_DIR, parse_checkpoint_name).items():
            if later > step:
                objects.delete(self.join(CHECKPOINTS_DIR, name), self.options)
        for index, name in self._names(EPISODES_DIR, parse_step_dir).items():
            if index >= step:
                objects.delete(self.join(EPISODES_DIR, name), self.options)
        for label in self.heldout_labels():
            done = parse_heldout_label(label)
            if label == HELDOUT_AFTER or (done is not None and done > step):
                objects.delete(self.heldout_store(label), self.options)

    def clear_records(self) -> None:
        """Delete every checkpoint, episode and held-out store of the run."""
        for sub in RECORD_DIRS:
            objects.delete(self.join(sub), self.options)

    def start_over(self, records: RunLayout | None = None) -> None:
        """Delete an earlier run of this directory, and its records at a separate store URL.

        Raises UserError, deleting nothing, when the directory holds files but no config.toml (not a run).
        """
        run_dir = self.dir
        if run_dir.exists() and any(run_dir.iterdir()):
            if not self.config.is_file():
                raise UserError("run directory exists and is not an rlvr run", file=run_dir,
                                fix="choose another name or output_dir")
            shutil.rmtree(run_dir)
        if records is not None and records.root != self.root:
            records.clear_records()
