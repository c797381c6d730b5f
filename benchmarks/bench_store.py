"""Trajectory store, queries, monitoring and the report, each beside a baseline measured in the same run.

1. `EpisodeStore.write` of one step (256 episodes of 600 tokens) — Parquet built in memory, fsynced, renamed
   into place — against `pyarrow.parquet.write_table` of the same rows straight to a file (not atomic, no
   fsync), and against a JSONL dump of the episodes (`model_dump_json` per line).
2. `EpisodeStore.read` of the whole run against `pyarrow.parquet.read_table` of the same files.
3. `rlvr query` (DuckDB over the parts, newest write per episode) against DuckDB's `read_parquet` alone.
4. `Monitor.log` of one step (metrics, detectors, JSONL and TensorBoard) against computing the metrics alone.
5. `write_report` of the whole run.

Run alone: `.venv/bin/python benchmarks/bench_store.py`.
"""
from __future__ import annotations

import logging
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from rlvr.config import MonitorConfig
from rlvr.envs.messages import Message, ToolCall
from rlvr.monitor import Monitor, compute_metrics
from rlvr.monitor.report import write_report
from rlvr.rollout.episode import Episode
from rlvr.store import EpisodeStore
from rlvr.store.query import query
from rlvr.store.schema import episodes_to_table
from rlvr.verify.verdict import Check, Verdict

STEPS, BATCH, TOKENS = 20, 256, 600


def _batch(step: int, rng: random.Random) -> list[Episode]:
    eps = []
    for i in range(BATCH):
        ok = rng.random() < 0.4
        eps.append(Episode(
            step=step, task_id=f"t{i // 8}", domain=("code", "math")[i % 2], group_id=f"{step}:{i // 8}",
            sample_index=i % 8, policy_version=step,
            messages=[Message(role="user", content="Write f. " * 40),
                      Message(role="assistant", content="x = 1\n" * 60,
                              tool_calls=[ToolCall(id="c", name="run", arguments={"cmd": "pytest"})]),
                      Message(role="tool", content="1 failed\n" * 20, exec_status="exit_nonzero", name="run"),
                      Message(role="assistant", content="def f(): return 1\n" * 10)],
            token_ids=[rng.randrange(50_000) for _ in range(TOKENS)], loss_mask=[1] * TOKENS,
            logprobs=[-rng.random() for _ in range(TOKENS)],
            verdict=Verdict.from_checks([Check(name="hidden/t.py::test_a", score=float(ok), passed=ok,
                                               detail="" if ok else "AssertionError: assert 1 == 2")]),
            reward=float(ok), status="done", num_turns=2, num_generated_tokens=TOKENS // 2,
            timings={"generate": 0.5, "tools": 0.05, "verify": 0.02}))
    return eps


def _pair(ours: Callable[[], object], base: Callable[[], object], reps: int) -> tuple[float, float]:
    """Medians of both, measured alternately so that load from elsewhere falls on both alike."""
    a, b = [], []
    for _ in range(reps):
        for fn, out in ((ours, a), (base, b)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return statistics.median(a), statistics.median(b)


def main() -> None:
    # alerts on random data are not the point
    logging.getLogger("rlvr.monitor").setLevel(logging.CRITICAL + 1)
    rng = random.Random(0)
    batches = [_batch(s, rng) for s in range(STEPS)]
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = EpisodeStore(root / "run")
        plain = root / "plain"
        plain.mkdir()
        ours_steps, plain_steps = iter(range(STEPS)), iter(range(STEPS))
        t_write, t_plain = _pair(lambda: store.write((s := next(ours_steps)), batches[s]),
                                 lambda: pq.write_table(episodes_to_table(batches[(s := next(plain_steps))]),
                                                        plain / f"{s}.parquet", compression="zstd"), STEPS)
        j = iter(range(5))
        spare = EpisodeStore(root / "spare")
        t_write5, t_jsonl = _pair(lambda: spare.write(0, batches[0]),
                                  lambda: (root / f"{next(j)}.jsonl").write_text(
            "\n".join(e.model_dump_json() for e in batches[0])), 5)
        rows.append((f"write one step ({BATCH} episodes)", t_write, t_plain, "pq.write_table, not atomic"))
        rows.append(("  same, against a JSONL dump", t_write5, t_jsonl, "model_dump_json per line"))

        files = store.parts()
        t_read, t_pq = _pair(store.read, lambda: pq.read_table(files, partitioning=None), 5)
        rows.append((f"read the run ({len(store.read(columns=['step']))} episodes)", t_read, t_pq,
                     "pq.read_table of the files"))

        sql = "SELECT domain, step, avg(reward), sum(num_flags) FROM episodes GROUP BY ALL"
        listing = "[" + ", ".join(f"'{f}'" for f in files) + "]"
        raw = sql.replace("episodes", f"read_parquet({listing}, hive_partitioning=false)")
        t_q, t_duck = _pair(lambda: query(store, sql), lambda: duckdb.connect().sql(raw).fetchall(), 5)
        rows.append(("query: group by domain, step", t_q, t_duck, "DuckDB read_parquet alone"))

        mon = Monitor(root / "mon", MonitorConfig())
        m = iter(range(STEPS))
        t_log, t_metrics = _pair(lambda: mon.log((s := next(m)), batches[s], {"policy/entropy": 1.0}),
                                 lambda: compute_metrics(batches[0]), STEPS)
        mon.close()
        rows.append((f"Monitor.log of one step ({BATCH} episodes)", t_log, t_metrics,
                     "compute_metrics alone"))

        (root / "run" / "metrics.jsonl").write_text((root / "mon" / "metrics.jsonl").read_text())
        t_rep, t_read1 = _pair(lambda: write_report(root / "run"), store.read, 3)
        rows.append(("write_report of that run", t_rep, t_read1, "reading the run once"))
        size = (root / "run" / "report.html").stat().st_size

    table = Table("what", "rlvr", "baseline", "ratio", "baseline is")
    for what, ours, base, note in rows:
        table.add_row(what, f"{ours * 1000:.1f} ms", f"{base * 1000:.1f} ms", f"{ours / base:.2f}x", note)
    Console().print(table)
    print(f"report size: {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
