"""`rlvr eval` on the real model, as a person runs it: greedy short answers, the progress bar on stderr, every
episode in the eval's store, and the report's viewer showing what the model said."""
from __future__ import annotations

import json

import pytest

from rlvr.store.episodes import open_run

from .conftest import REPO

pytestmark = pytest.mark.real


def test_eval_of_the_real_model_keeps_its_transcripts(cli, real_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    example = REPO / "examples" / "smollm2-eval.toml"  # its [policy] and [rollout], the options over them
    res = cli(["eval", "--policy", f"hf:{real_dir}", "--tasks", "rg-basic_arithmetic:3", "-k", "2",
               "--config", str(example), "--temperature", "0", "--max-new-tokens", "16", "--json"])
    assert res.code == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["episodes"] == 6 and not rep["partial"] and rep["sampling"]["temperature"] == 0.0
    assert "6/6 episodes" in res.stderr
    dom = rep["domains"]["rg-basic_arithmetic"]
    assert dom["n"] == 3 and dom["samples"] == 6 and 0.0 <= dom["pass@1"] <= 1.0
    [run] = list((tmp_path / "runs" / "eval").glob("*"))
    stored = open_run(run).episodes()
    assert len(stored) == 6 and all(0 < e.num_generated_tokens <= 16 for e in stored)
    said = [m.content for e in stored for m in e.messages if m.role == "assistant"]
    assert len(said) == 6 and all(said)
    # greedy: both samples of a task say the same thing
    by_task: dict[str, set[str]] = {}
    for e in stored:
        by_task.setdefault(e.task_id, set()).add(e.messages[-1].content)
    assert all(len(v) == 1 for v in by_task.values())
    assert cli(["report", str(run)]).code == 0
    html = (run / "report.html").read_text()
    assert json.dumps(said[0])[1:40] in html.replace("\\u003c", "<").replace("\\u003e",
                                                                             ">").replace("\\u0026", "&")
