"""Training checkpoints: model, optimizer, schedule, RNG states, step and scheduler state, for exact resume.

A checkpoint is one torch file under the run's storage URL (`checkpoints/step-NNNNNN.pt`, see
rlvr.store.layout), written atomically; the `checkpoints/latest` pointer is updated only after the file is
complete, so a run killed at any moment resumes from its last whole checkpoint, at the step after it.
"""
from __future__ import annotations

import random
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
