"""The verl adapter, called as verl calls it: the exported Parquet read back as verl's RLHFDataset reads its
columns, and `compute_score` loaded from its file path the way verl loads a custom reward function. (verl
itself is not installed for these tests: it pins its own torch and vLLM stacks; its 0.9.1 source was read for
the call.)"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import rlvr.integrations.verl as verl_adapter
from rlvr.errors import UserError


def load_like_verl(path: str, name: str):  # type: ignore[no-untyped-def]
    """verl.utils.import_utils.load_extern_object: import a module from a file and take one attribute."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_export_and_compute_score_as_verl_uses_them(cli,
                                                    tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "train.parquet"
    r = cli(["tasks", "export", "--tasks", "math:3,code:2", "--format", "verl", "-o", str(out)])
    assert r.code == 2 and "multi-turn" in r.stderr  # code's default tier acts through tools
    assert not out.exists()
    r = cli(["tasks", "export", "--tasks", "math:4", "--format", "verl", "-o", str(out), "--seed", "1"])
    assert r.code == 0, r.stderr
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 4 and set(rows[0]) == {"data_source", "prompt", "ability", "reward_model",
                                               "extra_info"}
    assert rows[0]["data_source"] == "rlvr/math" and rows[0]["ability"] == "math"
    assert rows[0]["prompt"][0]["role"] == "user" and rows[0]["reward_model"]["style"] == "rule"
    compute_score = load_like_verl(verl_adapter.__file__, "compute_score")
    for row in rows:
        extra = dict(row["extra_info"], num_turns=None, rollout_reward_scores={})  # what verl adds
        truth = row["reward_model"]["ground_truth"]
        good = compute_score(data_source=row["data_source"], solution_str=f"<answer>{truth}</answer>",
                             ground_truth=truth, extra_info=extra)
        bad = compute_score(data_source=row["data_source"], solution_str="<answer>banana</answer>",
                            ground_truth=truth, extra_info=extra)
        assert good["score"] == 1.0 and good["acc"] == 1.0 and bad["score"] == 0.0 and bad["acc"] == 0.0
    with pytest.raises(UserError, match="not an rlvr dataset"):
        compute_score(data_source="openai/gsm8k", solution_str="1", ground_truth="1", extra_info={})
    with pytest.raises(UserError, match="rlvr_task"):
        compute_score(data_source="rlvr/math", solution_str="1", ground_truth="1", extra_info={})


def test_bad_export_inputs_are_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for args, why in ((["--tasks", "nosuch:3"], "nosuch"),
                      (["--tasks", "math:2", "--format", "csv"], "unknown export format"),
                      (["--tasks", "math:2", "-o", str(tmp_path / "no" / "x.parquet")], "no such directory")):
        if "-o" not in args:
            args = [*args, "-o", str(tmp_path / "x.parquet")]
        r = cli(["tasks", "export", *args])
        assert r.code == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not list(tmp_path.iterdir())
