"""The flat episode table: one row per Episode, its Arrow schema, and the conversions both ways.

Scalars that analyses filter on are plain columns (reward, passed, flag kinds, check scores, exec statuses,
timings, policy version). Nested records that are only read back whole (the transcript, the verdict, the
final state, metadata) are JSON strings, so a schema change in them never breaks old Parquet files. Token ids,
the loss mask and the log-probs are lists, stored exactly (log-probs as float64).
"""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from rlvr.envs.messages import Message
from rlvr.rollout.episode import Episode, tool_names
from rlvr.tasks.spec import FinalState
from rlvr.verify.verdict import Verdict

STORE_SCHEMA_VERSION = 1
"""Version of the table layout below; written into every Parquet file's metadata."""

TIMING_KEYS = ("generate", "tools", "verify", "total")
"""Episode timings flattened into `time_<key>_s` columns (all of them stay in the `timings` map)."""

_CHECK = pa.struct([("name", pa.string()), ("score", pa.float64()), ("weight", pa.float64()),
                    ("passed", pa.bool_()), ("detail", pa.string())])
_FLAG = pa.struct([("kind", pa.string()), ("message", pa.string()), ("evidence", pa.string())])

SCHEMA = pa.schema([
    ("episode_id", pa.string()), ("run_id", pa.string()), ("step", pa.int64()),
    ("task_id", pa.string()), ("domain", pa.string()), ("group_id", pa.string()),
    ("sample_index", pa.int64()), ("seed", pa.int64()), ("policy_version", pa.int64()),
    ("status", pa.string()), ("truncated_by", pa.string()), ("context_elided", pa.bool_()),
    ("num_turns", pa.int64()), ("num_generated_tokens", pa.int64()), ("num_tokens", pa.int64()),
    ("infra_retries", pa.int64()), ("node", pa.string()), ("lost_nodes", pa.list_(pa.string())),
    # outcome
    ("reward", pa.float64()), ("passed", pa.bool_()), ("masked", pa.bool_()), ("score", pa.float64()),
    ("infra_error", pa.string()), ("num_flags", pa.int64()), ("flag_kinds", pa.list_(pa.string())),
    ("flags", pa.list_(_FLAG)), ("checks", pa.list_(_CHECK)), ("checks_passed", pa.int64()),
    ("checks_total", pa.int64()), ("failed_checks", pa.list_(pa.string())),
    # sandbox and tools
    ("num_tool_calls", pa.int64()), ("tool_names", pa.list_(pa.string())),
    ("exec_statuses", pa.list_(pa.string())), ("num_exec_errors", pa.int64()),
    # timings (seconds)
    *[(f"time_{k}_s", pa.float64()) for k in TIMING_KEYS],
    ("timings", pa.map_(pa.string(), pa.float64())), ("verify_timings", pa.map_(pa.string(), pa.float64())),
    # text
    ("prompt", pa.string()), ("response", pa.string()), ("final_answer", pa.string()),
    # tokens
    ("token_ids", pa.list_(pa.int64())), ("loss_mask", pa.list_(pa.int8())),
    ("logprobs", pa.list_(pa.float64())),
    # nested records, whole
    ("messages_json", pa.string()), ("verdict_json", pa.string()), ("final_files_json", pa.string()),
    ("metadata_json", pa.string()), ("schema_version", pa.int64()), ("store_schema_version", pa.int64()),
])
"""The one flat table of episodes (`episodes` in `rlvr query`)."""


def _first(messages: list[Message], role: str) -> str | None:
    return next((m.content for m in messages if m.role == role), None)


def _last(messages: list[Message], role: str) -> str | None:
    return next((m.content for m in reversed(messages) if m.role == role), None)


def episode_to_row(ep: Episode) -> dict[str, Any]:
    """Flatten one Episode into a row of SCHEMA."""
    v = ep.verdict
    checks = list(v.checks) if v else []
    flags = list(v.flags) if v else []
    tool_msgs = [m for m in ep.messages if m.role == "tool"]
    statuses = [m.exec_status for m in tool_msgs if m.exec_status]
    return {
        "episode_id": ep.episode_id, "run_id": ep.run_id, "step": ep.step, "task_id": ep.task_id,
        "domain": ep.domain, "group_id": ep.group_id, "sample_index": ep.sample_index, "seed": ep.seed,
        "policy_version": ep.policy_version, "status": ep.status, "truncated_by": ep.truncated_by,
        "context_elided": ep.context_elided, "num_turns": ep.num_turns, "node": ep.node,
        "lost_nodes": list(ep.lost_nodes),
        "num_generated_tokens": ep.num_generated_tokens, "num_tokens": len(ep.token_ids),
        "infra_retries": ep.infra_retries,
        "reward": float(ep.reward), "passed": ep.passed, "masked": ep.masked,
        "score": float(v.score) if v else None, "infra_error": v.infra_error if v else None,
        "num_flags": len(flags), "flag_kinds": sorted({f.kind for f in flags}),
        "flags": [{"kind": f.kind, "message": f.message,
                   "evidence": json.dumps([e.model_dump(mode="json") for e in f.evidence])} for f in flags],
        "checks": [{"name": c.name, "score": c.score, "weight": c.weight, "passed": c.passed,
                    "detail": c.detail}
                   for c in checks],
        "checks_passed": sum(c.passed for c in checks), "checks_total": len(checks),
        "failed_checks": [c.name for c in checks if not c.passed],
        # the calls the model wrote: in the env loop one tool message answers each (whether written in the
        # text format or parsed natively); in an agent's episode the gateway read them from the model's turns
        "num_tool_calls": len(tool_names(ep)), "tool_names": tool_names(ep),
        "exec_statuses": statuses,
        "num_exec_errors": sum(s != "ok" for s in statuses),
        **{f"time_{k}_s": ep.timings.get(k) for k in TIMING_KEYS},
        "timings": list(ep.timings.items()), "verify_timings": list(v.timings.items()) if v else [],
        "prompt": _first(ep.messages, "user"), "response": _last(ep.messages, "assistant"),
        "final_answer": ep.final_state.answer,
        "token_ids": ep.token_ids, "loss_mask": ep.loss_mask, "logprobs": ep.logprobs,
        "messages_json": json.dumps([m.model_dump(mode="json") for m in ep.messages]),
        "verdict_json": v.model_dump_json() if v else None,
        "final_files_json": json.dumps(ep.final_state.files),
        "metadata_json": json.dumps(ep.metadata, default=str),
        "schema_version": ep.schema_version, "store_schema_version": STORE_SCHEMA_VERSION,
    }


def episodes_to_table(episodes: list[Episode]) -> pa.Table:
    """Episodes as one Arrow table of SCHEMA (with the schema version in its metadata)."""
    table = pa.Table.from_pylist([episode_to_row(e) for e in episodes], schema=SCHEMA)
    return table.replace_schema_metadata({b"rlvr.store_schema_version": str(STORE_SCHEMA_VERSION).encode()})


def row_to_episode(row: dict[str, Any]) -> Episode:
    """Rebuild the Episode a row was made from (lossless for every Episode field)."""
    verdict = Verdict.model_validate_json(row["verdict_json"]) if row.get("verdict_json") else None
    final = FinalState(files=json.loads(row.get("final_files_json") or "{}"), answer=row.get("final_answer"))
    timings = row.get("timings") or []
    return Episode(
        episode_id=row["episode_id"], run_id=row.get("run_id") or "", step=int(row["step"]),
        task_id=row["task_id"], domain=row["domain"], group_id=row.get("group_id") or "",
        sample_index=int(row.get("sample_index") or 0), seed=int(row.get("seed") or 0),
        policy_version=int(row.get("policy_version") or 0),
        messages=[Message.model_validate(m) for m in json.loads(row.get("messages_json") or "[]")],
        token_ids=list(row.get("token_ids") or []), loss_mask=list(row.get("loss_mask") or []),
        logprobs=list(row.get("logprobs") or []), final_state=final, verdict=verdict,
        reward=float(row.get("reward") or 0.0), status=row.get("status") or "pending",
        truncated_by=row.get("truncated_by"), context_elided=bool(row.get("context_elided")),
        num_turns=int(row.get("num_turns") or 0),
        num_generated_tokens=int(row.get("num_generated_tokens") or 0),
        infra_retries=int(row.get("infra_retries") or 0), node=row.get("node"),
        lost_nodes=list(row.get("lost_nodes") or []),
        timings=dict(timings.items() if isinstance(timings, dict) else timings),
        metadata=json.loads(row.get("metadata_json") or "{}"),
        schema_version=int(row.get("schema_version") or 1),
    )
