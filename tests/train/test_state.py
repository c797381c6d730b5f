"""RunState: the run's own progress, saved and restored as one versioned record."""
from __future__ import annotations

import pytest

from rlvr.errors import UserError
from rlvr.train.state import RUN_STATE_VERSION, HeldoutResult, RunState


def test_round_trip_keeps_every_field_but_the_process_local_one() -> None:
    before = HeldoutResult(pass1=0.25, greedy=0.5, tasks=8, samples_per_task=4, ci=[0.1, 0.4], masked=1)
    state = RunState(step=5, sft={"sft/loss": 1.5}, before=before, wall_before=12.0,
                     pending={6: ['{"id": "t"}']}, resumed_from=3)
    state.add_point(before, 0, 1.26)
    state.add_point(None, 5, 2.0)  # no held-out set: no point
    saved = state.to_dict()
    assert saved["version"] == RUN_STATE_VERSION and "resumed_from" not in saved
    back = RunState.from_dict(saved, source="ckpt", resumed_from=5)
    assert (back.step == 5 and back.before == before and back.sft == state.sft
            and back.pending == state.pending)
    assert [(p.step, p.wall_s, p.pass1) for p in back.curve] == [(0, 1.3, 0.25)] and back.resumed_from == 5


@pytest.mark.parametrize("data", [None, {}, {"version": RUN_STATE_VERSION + 1, "step": 1}])
def test_another_version_is_one_clear_line(data: object) -> None:
    with pytest.raises(UserError, match="run state version") as err:
        RunState.from_dict(data, source="runs/x/checkpoints/step-000001.pt")
    assert err.value.file is not None and err.value.field == "run_state.version"
