"""Exports: recovery samples (SFT JSONL) and contrastive pairs (preference JSONL)."""
from __future__ import annotations

import json

from rlvr.store import EpisodeStore
from rlvr.store.exports import contrastive_pairs, recovery_samples
from tests.store.synthetic import episode


def _group(step=0, task="t"):
    return [episode(step, task, sample=0, reward=1.0),  # passes
            episode(step, task, sample=1, reward=0.0, error="AssertionError: assert 1 == 2"),
            episode(step, task, sample=2, reward=1.0, flags=("tampering",)),  # flagged: never the good one
            episode(step, task, sample=3, infra="sandbox crashed")]  # masked: never used


def test_recovery_sample_is_failure_error_then_success():
    eps = _group()
    [rec] = recovery_samples(eps)
    msgs = rec["messages"]
    assert [m["role"] for m in msgs[:2]] == ["system", "user"]
    assert rec["failed_episode_id"] == eps[1].episode_id and rec["passed_episode_id"] == eps[0].episode_id
    feedback = next(m for m in msgs[2:] if m["role"] == "user")
    assert "assert 1 == 2" in feedback["content"] and "hidden/test_sol.py::test_a" in feedback["content"]
    # The sample ends with the passing attempt's final answer; tool calls survive in chat format.
    assert msgs[-1] == {"role": "assistant", "content": "def f(xs): return xs[0]"}
    assert any(m.get("tool_calls") for m in msgs) and any(m["role"] == "tool" for m in msgs)


def test_no_recovery_without_a_clean_pass():
    eps = [e for e in _group() if e.sample_index != 0]
    assert recovery_samples(eps) == []


def test_contrastive_pairs_same_group_only():
    eps = _group(task="a") + [episode(0, "b", sample=0, reward=0.0, error="x")]
    [pair] = contrastive_pairs(eps)
    assert pair["chosen_episode_id"] == eps[0].episode_id and pair["rejected_episode_id"] == eps[1].episode_id
    assert pair["prompt"][-1] == {"role": "user", "content": "Solve task a."}
    assert (pair["chosen"][-1]["content"].endswith("xs[0]")
            and pair["rejected"][-1]["content"].endswith("xs[1]"))
    assert pair["chosen_reward"] == 1.0 and pair["rejected_reward"] == 0.0


def test_pairs_are_capped_per_group():
    eps = [episode(0, "t", sample=i, reward=float(i % 2)) for i in range(20)]
    assert len(contrastive_pairs(eps)) == 4


def test_cli_exports_write_jsonl(tmp_path, cli):
    store = EpisodeStore(tmp_path / "run")
    store.write(0, _group())
    out = tmp_path / "out" / "rec.jsonl"
    res = cli(["failures", str(tmp_path / "run"), "--export", "recovery", "-o", str(out)])
    assert res.code == 0, res.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["task_id"] == "t"
    res = cli(["failures", str(tmp_path / "run"), "--export", "contrastive", "--json"])
    assert res.code == 0 and json.loads(res.stdout)["records"] == 1
    assert (tmp_path / "run" / "contrastive.jsonl").is_file()
    res = cli(["failures", str(tmp_path / "run"), "--export", "dpo"])
    assert res.code == 2 and "unknown export 'dpo'" in res.stderr and "recovery, contrastive" in res.stderr


def test_a_hack_is_rejected_in_pairs_but_never_a_recovery_attempt():
    eps = [episode(0, "t", sample=0, reward=1.0),
           episode(0, "t", sample=1, reward=1.0, flags=("exit_trick",))]
    assert recovery_samples(eps) == []
    [pair] = contrastive_pairs(eps)
    assert pair["rejected_episode_id"] == eps[1].episode_id


def test_sft_records_read_a_familys_own_calls():
    from rlvr.envs.dialects import DIALECTS
    from rlvr.envs.messages import Message, ToolCall
    from rlvr.store.exports import sft_record

    glm = DIALECTS["glm45"]
    turn = "\n<think>Check first.</think>\n" + glm.format_turn([ToolCall(name="write_file", arguments={
        "path": "a.py", "content": "42"})], "Writing.").lstrip("\n")
    ep = episode(0, "t", reward=1.0).model_copy(update={"metadata": {"tool_format": "glm45"}, "messages": [
        Message(role="user", content="go"), Message(role="assistant", content=turn),
        Message(role="tool", content="ok", name="write_file")]})
    props = {"path": {"type": "string"}, "content": {"type": "string"}}
    tools = [{"type": "function", "function": {"name": "write_file",
                                               "parameters": {"type": "object", "properties": props}}}]
    asst = sft_record(ep, tools)["messages"][1]
    want = {"name": "write_file", "arguments": {"path": "a.py", "content": "42"}}
    assert asst["tool_calls"][0]["function"] == want
    assert asst["reasoning_content"] == "Check first." and "<arg_key>" not in asst["content"]
