"""Training checkpoints: model, optimizer, schedule, RNG states, step and scheduler state, for exact resume.

A checkpoint is one torch file under the run's storage URL (`checkpoints/step-NNNNNN.pt`, see
rlvr.store.layout), written atomically; the `checkpoints/latest` pointer is updated only after the file is
complete, so a run killed at any moment resumes from its last whole checkpoint, at the step after it.
Weights and optimizer state are saved in full, keyed by parameter name (gathered from every rank when the
run is distributed), so a run resumes at any world size, and `export` turns the last one into a plain
Hugging Face directory.
"""
from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.errors import UserError
from rlvr.store import objects
from rlvr.store.layout import RunLayout

CHECKPOINT_SCHEMA_VERSION = 1
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
    """Write the state of the run after `step` (the model, optimizer, ... are in `state`); returns its URL."""
    layout = RunLayout(run_url)
    url = layout.checkpoint(step)
    with objects.open_atomic(url) as f:
        torch.save({**state, "step": step, "rng": rng_state(), "schema_version": CHECKPOINT_SCHEMA_VERSION}, f)
    objects.put_bytes(layout.latest, str(step).encode())
    layout.prune_checkpoints(KEEP)
    return url


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


def load(run_url: str, step: int) -> dict[str, Any]:
    """The state saved after `step` (the caller restores the model and optimizer; RNG states are restored here)."""
    url = RunLayout(run_url).checkpoint(step)
    if not objects.exists(url):
        raise UserError("checkpoint named by `latest` is missing", file=url,
                        fix="start with --no-resume, or restore the file")
    with objects.open_read(url) as f:
        state = torch.load(f, map_location="cpu", weights_only=False)
    if state.get("schema_version") != CHECKPOINT_SCHEMA_VERSION:
        raise UserError(f"checkpoint schema {state.get('schema_version')} is not {CHECKPOINT_SCHEMA_VERSION}",
                        file=url, fix="resume with the rlvr version that wrote it, or start with --no-resume")
    set_rng_state(state["rng"])
    return state


def export(run_dir: str | Path, out: str | Path, *, adapter: bool = False) -> Path:
    """Write a run's last checkpoint as a plain Hugging Face directory (safetensors, config, tokenizer) that
    `transformers` and `rlvr eval --policy hf:DIR` load: LoRA merged into the weights, or with `adapter`
    kept as a peft adapter over the base model. The checkpoint holds full weights whatever the world size
    that wrote it. Written to a temporary sibling and renamed, so `out` is whole or absent."""
    from rlvr.config import load_config
    from rlvr.rollout.backends import make_policy
    from rlvr.train.parts import _apply_lora

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
        _apply_lora(policy, cfg)
    policy.model.load_state_dict(saved["model"])  # type: ignore[attr-defined]
    model = policy.model if adapter or not cfg.train.lora else policy.model.merge_and_unload()  # type: ignore[attr-defined]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        policy.tokenizer.save_pretrained(tmp)  # type: ignore[attr-defined]
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
