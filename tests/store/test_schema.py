"""The flat episode table: lossless round trips and the derived query columns."""
from __future__ import annotations

import pyarrow as pa

from rlvr.envs.messages import Message
from rlvr.rollout.episode import Episode
from rlvr.store.schema import SCHEMA, episode_to_row, episodes_to_table, row_to_episode
from rlvr.verify.verdict import Verdict
from tests.store.synthetic import TRACEBACK, episode


def test_round_trip_is_lossless_for_every_field():
    ep = episode(3, "t1", reward=0.25, flags=("tampering",), exec_status="exit_nonzero", error=TRACEBACK)
    ep = ep.model_copy(update={"metadata": {"nested": {"a": [1, 2.5, None]}, "unicode": "ünï\u2028code\x00"},
                               "logprobs": [0.0] * 10 + [-0.1234567890123456789] * 50,
                               "truncated_by": "turns",
                               "context_elided": True, "infra_retries": 2})
    row = pa.Table.from_pylist([episode_to_row(ep)], schema=SCHEMA).to_pylist()[0]
    assert row_to_episode(row) == ep


def test_episode_without_verdict_or_messages_round_trips():
    ep = Episode(task_id="x", domain="math")
    row = episodes_to_table([ep]).to_pylist()[0]
    assert row["score"] is None and row["prompt"] is None and row["checks_total"] == 0
    assert row_to_episode(row) == ep


def test_infra_verdict_is_masked_in_the_table():
    row = episode_to_row(episode(0, "t", infra="sandbox crashed"))
    assert row["masked"] and row["infra_error"] == "sandbox crashed" and row["status"] == "infra_error"


def test_derived_columns_are_what_queries_need():
    ep = episode(1, "t", reward=0.0, flags=("tampering", "exit_trick"), exec_status="timeout", error="boom")
    row = episode_to_row(ep)
    assert row["flag_kinds"] == ["exit_trick", "tampering"] and row["num_flags"] == 2
    assert row["exec_statuses"] == ["timeout"] and row["num_exec_errors"] == 1
    assert row["tool_names"] == ["run"] and row["num_tool_calls"] == 1
    assert row["time_generate_s"] == ep.timings["generate"] and dict(row["timings"]) == ep.timings
    assert row["prompt"] == "Solve task t." and row["response"].startswith("def f")
    assert row["num_tokens"] == len(ep.token_ids) and row["policy_version"] == 1


def test_tool_calls_written_as_text_are_counted_by_their_results():
    """A model that writes its calls in the text format leaves the assistant message's `tool_calls` empty; the
    Env's tool messages still answer each executed call, and the columns count those."""
    ep = episode(1, "t")
    msgs = [m.model_copy(update={"tool_calls": []}) for m in ep.messages]
    msgs.insert(4, msgs[3].model_copy(update={"name": "read_file", "content": "def f(xs): ..."}))
    row = episode_to_row(ep.model_copy(update={"messages": msgs}))
    assert row["num_tool_calls"] == 2 and row["tool_names"] == ["run", "read_file"]


def test_failed_checks_and_scores_are_columns():
    ep = Episode(task_id="t", domain="code", verdict=Verdict.from_checks([]))
    assert episode_to_row(ep)["failed_checks"] == []
    ep = episode(0, "t", reward=0.5, passed=False, failing_check="hidden/t.py::test_b")
    row = episode_to_row(ep)
    assert row["failed_checks"] == ["hidden/t.py::test_b"] and row["checks_passed"] == 1
    assert row["checks_total"] == 2 and row["score"] == 0.5


def test_schema_metadata_carries_the_version():
    table = episodes_to_table([Episode(task_id="t", domain="d",
                                       messages=[Message(role="user", content="q")])])
    assert table.schema.metadata[b"rlvr.store_schema_version"] == b"1"
