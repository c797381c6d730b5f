"""Checkpoints (rlvr.train.checkpoint): the sharded form (torch.distributed.checkpoint) written and read back
by one process with no process group, at a local path or an fsspec URL, and schemas this rlvr cannot read
refused in one line. Sharded checkpoints of real 2-rank runs are tested in test_distributed.py."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch

from rlvr.errors import UserError
from rlvr.store import objects
from rlvr.store.layout import RunLayout
from rlvr.train import checkpoint, distributed


def _model_and_optimizer(model_dir: Path, steps: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.arange(2, 12).reshape(2, 5)
    for _ in range(steps):
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("scheme", ["path", "file", "memory"])
def test_a_sharded_checkpoint_reads_back_exactly_without_a_process_group(tmp_path: Path, tiny_model_dir: Path,
                                                                         scheme: str) -> None:
    url = {"path": f"{tmp_path}/step-000002.dcp", "file": f"file://{tmp_path}/step-000002.dcp",
           "memory": f"memory://rlvr-ckpt-{uuid.uuid4().hex[:8]}/step-000002.dcp"}[scheme]
    model, optimizer = _model_and_optimizer(tiny_model_dir, steps=2)
    assert distributed.save_sharded(model, optimizer, checkpoint.storage(url, write=True))
    assert objects.exists(f"{url}/.metadata")
    # untrained, no optimizer state yet
    fresh, fresh_optimizer = _model_and_optimizer(tiny_model_dir, steps=0)
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    distributed.load_sharded(fresh, fresh_optimizer, checkpoint.storage(url, write=False))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    for p, q in zip(model.parameters(), fresh.parameters()):
        mine, read = optimizer.state[p], fresh_optimizer.state[q]
        assert mine.keys() == read.keys() and all(torch.equal(mine[k], read[k]) for k in mine)


@pytest.mark.filterwarnings("ignore")
def test_before_the_first_step_only_the_weights_are_saved(tmp_path: Path, tiny_model_dir: Path) -> None:
    model, optimizer = _model_and_optimizer(tiny_model_dir, steps=0)
    url = str(tmp_path / "step-000000.dcp")
    assert not distributed.save_sharded(model, optimizer, checkpoint.storage(url, write=True))
    assert not optimizer.state  # saving did not initialise the optimizer by a zero step
    fresh, _ = _model_and_optimizer(tiny_model_dir, steps=0)
    distributed.load_sharded(fresh, None, checkpoint.storage(url, write=False))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))


def test_a_checkpoint_schema_this_rlvr_cannot_read_is_refused_in_one_line(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    state = {"rng": [checkpoint.rng_state()] * 2, "optimizer_saved": False}
    with objects.open_atomic(layout.sharded_state(4)) as f:
        torch.save({**state, "schema_version": 99}, f)
    with pytest.raises(UserError, match="checkpoint schema 99 is not one this rlvr reads") as err:
        checkpoint.load(str(tmp_path), 4)
    assert err.value.file == layout.sharded_state(4) and "\n" not in str(err.value)
    checkpoint.save(str(tmp_path), 4, {})  # the one-file form of the same step replaces the sharded one
    assert not objects.exists(layout.checkpoint(4,
                                                sharded=True)) and checkpoint.latest_step(str(tmp_path)) == 4
    saved = torch.load(layout.checkpoint(4), weights_only=False)
    torch.save({**saved, "schema_version": 1}, layout.checkpoint(4))  # as every run wrote it before sharding
    assert checkpoint.load(str(tmp_path), 4)["step"] == 4 and "shards" not in checkpoint.load(str(tmp_path),
                                                                                              4)
