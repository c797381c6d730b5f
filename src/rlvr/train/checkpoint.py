"""Training checkpoints: model, optimizer, schedule, RNG states, step and scheduler state, for exact resume.

A run on one process writes one torch file under the run's storage URL (`checkpoints/step-NNNNNN.pt`, see
rlvr.store.layout), atomically. A run on several ranks writes a sharded checkpoint, the folder
`checkpoints/step-NNNNNN.dcp`: every rank its own shards of the weights and optimizer state with
torch.distributed.checkpoint (nothing is gathered to rank 0), and rank 0 the rest beside them (`run.pt`: the
step, every rank's RNG states, the scheduler and run state). Either way the `checkpoints/latest` pointer is
updated only after the whole checkpoint is written (by every rank), so a run killed at any moment resumes from
its last whole checkpoint, at the step after it. Tensors are keyed by parameter name in both forms, so a run
resumes at any world size (a sharded checkpoint is resharded as it is read), and `export` turns the last one,
of either form, into a plain Hugging Face directory.

`Checkpoints` is the run's policy over all of it, behind one object the loop calls: start a run fresh or
resume it (refusing a config that trains something else), save after a step, restore, and at the end export
the model, the summary and the report.
"""
from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlvr.atomic import atomic_dir, atomic_write
from rlvr.config import RunConfig, load_config
from rlvr.errors import UserError
from rlvr.store import objects
from rlvr.store.layout import SUMMARY_FILE, RunLayout
from rlvr.train import distributed
from rlvr.train.distributed import Dist
from rlvr.train.state import RunState

if TYPE_CHECKING:
    from rlvr.rollout.policies.trainable import TrainablePolicy
    from rlvr.schedule.scheduler import Scheduler
    from rlvr.train.update import PolicyUpdater

CHECKPOINT_SCHEMA_VERSION = 2
"""2: a run on several ranks writes a sharded checkpoint, its `rng` a list of every rank's states; 1: one
torch file only, as every run wrote it before (still read)."""
READABLE_SCHEMAS = (1, 2)
KEEP = 2
"""Checkpoints kept on storage (older ones are deleted once a newer one is complete)."""


def rng_state() -> dict[str, Any]:
    """Every random stream the trainer draws from."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_url: str, step: int, state: dict[str, Any]) -> str:
    """Write the state of the run after `step` as one file (the model, optimizer, ... are in `state`); its
    URL."""
    layout = RunLayout(run_url)
    url = layout.checkpoint(step)
    # one form a step: not also one a killed attempt left
    objects.delete(layout.checkpoint(step, sharded=True))
    with objects.open_atomic(url) as f:
        torch.save({**state, "step": step, "rng": rng_state(), "schema_version": CHECKPOINT_SCHEMA_VERSION},
                   f)
    _commit(layout, step)
    return url


def save_sharded(run_url: str, step: int, state: dict[str, Any], model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, dist: Dist) -> str:
    """Write the state of the run after `step` as a sharded checkpoint: every rank calls it, writes its shards
    of `model` and `optimizer` and hands its RNG states to rank 0, which writes them and `state` (rank 0's is
    the one kept) beside the shards; `latest` names it once every rank is done. Returns the folder's URL."""
    layout = RunLayout(run_url)
    url = layout.checkpoint(step, sharded=True)
    if dist.main:  # what a killed attempt left at this step (its shards may be of another world size)
        objects.delete(url)
        objects.delete(layout.checkpoint(step))
    dist.barrier()
    saved_optimizer = distributed.save_sharded(model, optimizer, storage(url, write=True))
    rngs = dist.gather(rng_state())
    if dist.main:
        with objects.open_atomic(layout.sharded_state(step)) as f:
            torch.save({**state, "step": step, "rng": rngs, "optimizer_saved": saved_optimizer,
                        "schema_version": CHECKPOINT_SCHEMA_VERSION}, f)
    dist.barrier()  # every rank's shards are whole before `latest` names them
    if dist.main:
        _commit(layout, step)
    return url


def _commit(layout: RunLayout, step: int) -> None:
    """Point `latest` at the checkpoint after `step`, now whole, and drop the older ones beyond KEEP."""
    objects.put_bytes(layout.latest, str(step).encode())
    layout.prune_checkpoints(KEEP)


def storage(url: str, *, write: bool) -> Any:
    """torch.distributed.checkpoint's writer (or reader) of a sharded checkpoint's folder: the local
    filesystem's for a path, fsspec's for a URL (`s3://...`)."""
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    if "://" not in url:
        return FileSystemWriter(url) if write else FileSystemReader(url)
    try:  # the module that has defined them since torch 2.1 (not every version exports them from the package)
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
    except ImportError:
        raise UserError(f"this torch cannot write sharded checkpoints to {url.split('://')[0]}:// URLs (no "
                        "FsspecWriter)", field="store.url",
                        fix="keep the run's records on a local or mounted path, or train "
                            "on one rank") from None
    return FsspecWriter(url) if write else FsspecReader(url)


def latest_step(run_url: str) -> int | None:
    """The step of the last complete checkpoint, or None when the run has none."""
    pointer = RunLayout(run_url).latest
    if not objects.exists(pointer):
        return None
    raw = objects.get_bytes(pointer).decode().strip()
    if not raw.isdigit():
        raise UserError(f"corrupt checkpoint pointer {raw[:40]!r}", file=pointer,
                        fix="delete it to resume from scratch, or start with --no-resume")
    return int(raw)


def load(run_url: str, step: int, rank: int = 0) -> dict[str, Any]:
    """The state saved after `step`, of either form; RNG states are restored here (a sharded checkpoint's of
    this rank, rank 0's where the writing run had fewer ranks). The caller restores the model and optimizer:
    from `state["model"]` and `state["updater"]["optimizer"]`, or for a sharded checkpoint with
    `load_shards(state, ...)` (`state["shards"]` is its folder)."""
    layout = RunLayout(run_url)
    sharded = objects.exists(layout.sharded_state(step))
    url = layout.sharded_state(step) if sharded else layout.checkpoint(step)
    if not objects.exists(url):
        raise UserError("checkpoint named by `latest` is missing", file=url,
                        fix="start with --no-resume, or restore the file")
    with objects.open_read(url) as f:
        state = torch.load(f, map_location="cpu", weights_only=False)
    if state.get("schema_version") not in READABLE_SCHEMAS:
        raise UserError(f"checkpoint schema {state.get('schema_version')} is not one this rlvr reads "
                        f"({', '.join(map(str, READABLE_SCHEMAS))})", file=url,
                        fix="resume with the rlvr version that wrote it, or start with --no-resume")
    rng = state["rng"]
    if isinstance(rng, list):  # a sharded checkpoint's: every rank's
        rng = rng[rank] if rank < len(rng) else rng[0]
    set_rng_state(rng)
    if sharded:
        state["shards"] = layout.checkpoint(step, sharded=True)
    return state


def load_shards(state: dict[str, Any], model: torch.nn.Module,
                optimizer: torch.optim.Optimizer | None = None) -> None:
    """Read a sharded checkpoint's weights (and optimizer state, when given and saved) from the folder
    `load` found into `model` as this process holds it (resharded to this world size; alone, with no process
    group)."""
    optimizer = optimizer if state.get("optimizer_saved") else None
    distributed.load_sharded(model, optimizer, storage(state["shards"], write=False))


def export(run_dir: str | Path, out: str | Path, *, adapter: bool = False) -> Path:
    """Write a run's last checkpoint as a plain Hugging Face directory (safetensors, config, tokenizer) that
    `transformers` and `rlvr eval --policy hf:DIR` load: LoRA merged into the weights, or with `adapter`
    kept as a peft adapter over the base model. The checkpoint is one file or the shards of a run on several
    ranks, which this one process reads in full. Written to a temporary sibling and renamed, so `out` is
    whole or absent."""
    from rlvr.rollout.policies.backends import make_policy
    from rlvr.train.update import apply_lora

    run_dir, out = Path(run_dir), Path(out)
    layout = RunLayout(run_dir)
    if not layout.config.is_file():
        raise UserError("not a run directory (no config.toml)", file=run_dir,
                        fix="give the directory `rlvr train` wrote (<output_dir>/<name>)")
    cfg = load_config(layout.config)
    if adapter and not cfg.train.lora:
        raise UserError("--adapter needs a LoRA run; this one trained all weights", file=layout.config,
                        field="train.lora", fix="export without --adapter")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError("output exists and is not an empty directory", file=out, fix="choose a new directory")
    run_url = cfg.store.url or str(run_dir)
    step = latest_step(run_url)
    if step is None:
        raise UserError("the run has no checkpoint yet", file=run_dir, fix="train it first (`rlvr train`)")
    saved = load(run_url, step)
    policy = make_policy(cfg.policy.model_copy(update={"device": "cpu"}))  # as the run built it
    if cfg.train.lora:
        apply_lora(policy, cfg.train.lora_rank)
    if "shards" in saved:
        load_shards(saved, policy.model)  # type: ignore[attr-defined]
    else:
        policy.model.load_state_dict(saved["model"])  # type: ignore[attr-defined]
    model = policy.model  # type: ignore[attr-defined]
    if cfg.train.lora and not adapter:
        model = model.merge_and_unload()
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        policy.tokenizer.save_pretrained(tmp)  # type: ignore[attr-defined]
    return out


RESUMABLE_CHANGES = ("train.steps", "train.checkpoint_every", "train.heldout_every", "sandbox.", "monitor.",
                     "cluster.", "store.storage_options", "train.world_size", "train.dist_backend",
                     "train.sharding",
                     "train.threads", "train.activation_checkpointing", "train.micro_batch_size",
                     "train.micro_batch_tokens")
"""Config fields a resumed run may change: its length and how it runs (on how many ranks, threads, and in what
memory: checkpointing and micro-batches give the same gradient), never what it trains. A run stopped by the
out-of-memory killer resumes with smaller micro-batches."""


class Checkpoints:
    """A run's checkpoint policy: fresh start or resume, save, restore, and the final export."""

    def __init__(self, cfg: RunConfig, run_url: str, dist: Dist = distributed.SINGLE) -> None:
        self.cfg = cfg
        self.run_url = run_url
        self.dist = dist
        self.policy: TrainablePolicy | None = None
        self.updater: PolicyUpdater | None = None
        self.scheduler: Scheduler | None = None

    def start(self, resume: bool) -> int | None:
        """The step to resume from (None: a fresh run). Rank 0 decides: an earlier run's checkpoints and
        records under the same name are dropped for a fresh run, a resumed one must train the same thing; the
        resolved config is written to the run directory. Every rank gets rank 0's answer."""
        start = None
        if self.dist.main:
            start = latest_step(self.run_url) if resume else None
            if start is None:
                RunLayout(self.cfg.run_dir).start_over(records=RunLayout(self.run_url))
            else:
                self.check_resumable()
            self.cfg.write(self.cfg.run_dir)
        return self.dist.broadcast(start)

    def attach(self, policy: TrainablePolicy, updater: PolicyUpdater, scheduler: Scheduler) -> None:
        """What a checkpoint holds besides the run state: the trained weights, the optimizer and the
        scheduler."""
        self.policy, self.updater, self.scheduler = policy, updater, scheduler

    def check_resumable(self) -> None:
        """Refuse to resume a checkpoint under a config that trains something else (the saved config.toml)."""
        saved = RunLayout(self.cfg.run_dir).config
        if not saved.is_file():
            return
        try:
            old = load_config(saved)
        except UserError:
            # a config this version cannot read: the checkpoint itself decides (it loads, or fails loudly)
            return
        before = _flat(old.model_dump(mode="json"))
        changed = [k for k, v in _flat(self.cfg.model_dump(mode="json")).items()
                   if before.get(k) != v and not k.startswith(RESUMABLE_CHANGES)]
        if changed:
            raise UserError(f"the run to resume was trained with another config "
                            f"({', '.join(changed[:3])} differ)",
                            file=saved, field=changed[0],
                            fix="start over with --no-resume, choose another name, or restore the "
                                "old setting")

    def save(self, state: RunState, wall_s: float) -> None:
        """A checkpoint after `state.step` steps: weights, optimizer, scheduler and the run state. Alone: one
        record, one file. On several ranks: each rank writes its own shards of the weights and optimizer state
        (nothing is gathered) and rank 0 the rest beside them. Both are keyed by parameter name, so a run
        resumes at any world size."""
        policy, updater, scheduler = self._attached()
        model, optimizer = policy.model, updater.optimizer
        record: dict[str, Any] = {
            "updater": {"lr_schedule": updater.lr_schedule.state_dict()},
            "scheduler": scheduler.state_dict(), "policy_version": policy.version,
            "run_state": dataclasses.replace(state, wall_before=wall_s).to_dict(),
            "world_size": self.dist.world_size,
        }
        if self.dist.active:
            save_sharded(self.run_url, state.step, record, model, optimizer, self.dist)
        else:
            record["model"], record["updater"]["optimizer"] = distributed.full_state(model, optimizer)
            save(self.run_url, state.step, record)
        self.dist.barrier()  # no rank runs ahead of a checkpoint it may have to resume from

    def restore(self, step: int) -> RunState:
        """The run as the checkpoint after `step` left it: weights, optimizer, schedule, scheduler, RNG states
        and the run state; records written after it are dropped (those steps are replayed, not stored twice).
        The caller brings the generation weights up to the restored ones."""
        policy, updater, scheduler = self._attached()
        saved = load(self.run_url, step, self.dist.rank)  # every rank reads it: its RNG states come back
        source = saved.get("shards") or RunLayout(self.run_url).checkpoint(step)
        state = RunState.from_dict(saved.get("run_state"), source=source, resumed_from=step)
        record = saved["updater"]
        if "shards" in saved:  # written by several ranks: resharded to this world size as it is read
            load_shards(saved, policy.model, updater.optimizer)
            updater.lr_schedule.load_state_dict(record["lr_schedule"])
        elif _by_name(record["optimizer"]):
            distributed.load_full_state(policy.model, updater.optimizer, saved["model"], record["optimizer"])
            updater.lr_schedule.load_state_dict(record["lr_schedule"])
        else:  # a single-process checkpoint of an earlier version (optimizer state by parameter index)
            policy.model.load_state_dict(saved["model"])
            updater.load_state_dict(record)
        scheduler.load_state_dict(saved["scheduler"])
        policy.version = int(saved["policy_version"])
        if self.dist.main:
            RunLayout(self.run_url).drop_after(step)
        self.dist.barrier()
        return state

    def finish(self, summary: dict[str, Any], close: Any = None) -> None:
        """Final model (loadable with `hf:<run_dir>/model`), summary.json, pass rates and the report (after
        `close()`, which flushes the monitor). With several ranks the sharded weights are gathered in full (a
        collective) and rank 0 writes them."""
        policy, _, scheduler = self._attached()
        layout = RunLayout(self.cfg.run_dir)
        if self.dist.active:
            model = distributed.unwrapped(policy.model)
            tied = ({n for n, _ in model.named_parameters(remove_duplicate=False)}
                    # second names of shared weights (a tied head)
                    - {n for n, _ in model.named_parameters()})
            weights = {k: v for k, v in distributed.full_weights(model) if k not in tied}
            if not self.dist.main:
                return
            model.save_pretrained(layout.model, state_dict=weights)
        else:
            policy.model.save_pretrained(layout.model)
        policy.tokenizer.save_pretrained(layout.model)
        scheduler.save_pass_rates(layout.pass_rates)
        atomic_write(layout.summary, json.dumps(summary, indent=2) + "\n")
        if close is not None:
            close()
        if self.cfg.monitor.report:
            from rlvr.monitor.report import write_report

            summary["report"] = str(write_report(self.cfg.run_dir))
        summary["summary"] = str(layout.summary)
        summary["model"] = str(layout.model)

    def _attached(self) -> tuple[TrainablePolicy, PolicyUpdater, Scheduler]:
        if self.policy is None or self.updater is None or self.scheduler is None:
            raise RuntimeError("Checkpoints.attach was not called")
        return self.policy, self.updater, self.scheduler


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict) and v and k != "domains":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _by_name(optimizer_state: dict) -> bool:
    """Whether a saved optimizer state is keyed by parameter name (any world size loads it), not by index."""
    groups = optimizer_state.get("param_groups") or [{}]
    return not optimizer_state or isinstance((groups[0].get("params") or [""])[0], str)


def load_summary(run_dir: str | Path) -> dict[str, Any]:
    """A finished run's summary.json."""
    path = Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        raise UserError("no summary.json: the run has not finished", file=path,
                        fix="run `rlvr train` to the end")
    return json.loads(path.read_text())
