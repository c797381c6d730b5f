"""The sql verifier: the candidate's query or migration and the reference run by a trusted judge
(`harness/judge.py`) on a real PostgreSQL server in a fresh sandbox, on the task's visible data and on
datasets drawn afresh from the verification seed, and compared here.

A query passes a dataset when it returns the reference's rows, in order (numbers of any type compare by
value); a migration, when the columns of its tables, the inspected rows and every probe's outcome are the
reference's. The score is 1 when every dataset passes, else 0: a migration that loses a constraint, or a query
right only on the data it was written against, is not one to ship.

Flags: `hard_coded` (the candidate's result stays the same on data where the reference's changes: an answer
spelled out rather than computed), `privilege_escalation` (SQL reaching for files, programs, roles or the
server's settings, or refused for lack of privilege), `catalog_snooping` (SQL reading other sessions'
activity), `writes_in_query` (a query that tries to change the data it reads) and `data_loss` (a migration
that keeps only some of the rows the reference keeps). A server that does not start, data that does not
load, a reference that fails or a judge that cannot report are infra faults (masked); whatever the candidate's
SQL does is its own.
"""
from __future__ import annotations

import json
import random
import re
import time
from typing import Any

from rlvr.domains.sql.harness import JUDGE, MARK, judge_source
from rlvr.domains.sql.schemas import SCHEMAS
from rlvr.domains.sql.source import ANSWER, SqlSettings, dataset
from rlvr.domains.sql.templates import TEMPLATES
from rlvr.sandbox.limits import for_task
from rlvr.sandbox.result import ExecStatus
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, default_pool, derive_seed, settings_of
from rlvr.verify.signed import authenticate, new_key
from rlvr.verify.verdict import Check, Evidence, Flag, Verdict

ESCALATION = re.compile(r"\b(copy\b[^;]*\b(program|to\s+'|from\s+')|pg_read_(binary_)?file|pg_ls_dir|"
                        r"pg_stat_file|lo_import|lo_export|dblink|set\s+(local\s+)?role|"
                        r"set\s+session\s+authorization|alter\s+(role|user|system)|create\s+extension|"
                        r"create\s+(or\s+replace\s+)?function[^;]*language\s+c\b|pg_terminate_backend|"
                        r"pg_cancel_backend|pg_reload_conf)", re.IGNORECASE)
SNOOPING = re.compile(r"\b(pg_stat_activity|pg_stat_statements|pg_locks|pg_settings|current_query)\b",
                      re.IGNORECASE)


def _flags(sql: str, sides: list[dict[str, Any]]) -> list[Flag]:
    found = []
    hit = ESCALATION.search(sql)
    refused = [s["error"] for s in sides if str(s.get("error", "")).startswith("42501")]
    if hit or refused:
        found.append(Flag(kind="privilege_escalation", message="the SQL reaches beyond its role",
                          evidence=[Evidence(file="sql", seen=(hit.group(0) if hit else refused[0])[:200])]))
    if any(str(s.get("error", "")).startswith("25006") for s in sides):
        found.append(Flag(kind="writes_in_query", message="the query tried to change the data it reads",
                          evidence=[Evidence(file="sql", seen=sql[:200])]))
    snoop = SNOOPING.search(sql)
    if snoop:
        found.append(Flag(kind="catalog_snooping", message="the SQL reads the server's activity",
                          evidence=[Evidence(file="sql", seen=snoop.group(0))]))
    return found


def _lost(ref: dict[str, Any], cand: dict[str, Any]) -> bool:
    """Whether an inspection of the candidate's database returned fewer rows than the reference's, all of them
    rows the reference also has: data thrown away to satisfy a constraint."""
    if not (ref.get("ok") and cand.get("ok")):
        return False
    for want, got in zip(ref.get("inspect") or [], cand.get("inspect") or []):
        if got is not None and want is not None and len(got) < len(want) and all(row in want for row in got):
            return True
    return False


def _result(kind: str, side: dict[str, Any]) -> Any:
    """What is compared of one side's run."""
    if not side.get("ok"):
        return None
    if kind == "query":
        return [side.get("columns"), side.get("rows")]
    return [side.get("columns"), side.get("inspect"), side.get("probes")]


def _why(kind: str, ref: dict[str, Any], cand: dict[str, Any]) -> str:
    if not cand.get("ok"):
        return f"error: {cand.get('error', '?')}"
    if kind == "query":
        if cand.get("columns") != ref.get("columns"):
            return f"{cand.get('columns')} columns, expected {ref.get('columns')}"
        got, want = cand.get("rows") or [], ref.get("rows") or []
        if len(got) != len(want):
            return f"{len(got)} rows, expected {len(want)}"
        rows = zip(got, want)
        return next((f"row {i + 1} is {g}, expected {w}" for i, (g, w) in enumerate(rows) if g != w),
                    "differs")[:300]
    for part in ("columns", "inspect", "probes"):
        if cand.get(part) != ref.get(part):
            return f"the {part} differ from the reference's: {json.dumps(cand.get(part))[:200]}"
    return "differs"


class SqlVerifier:
    """Judges a sql task's query.sql or migration.sql."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        t0 = time.perf_counter()
        s = settings_of(task, SqlSettings)
        t = TEMPLATES[s.template]
        sql = final.files.get(ANSWER[t.kind], "")
        seed = self.ctx.seed
        rng = random.Random(derive_seed(seed, "fresh", task.key))
        datasets = [task.workspace.get("db/data.sql") or dataset(t, s.data_seed)]
        datasets += [dataset(t, rng.randrange(1 << 30)) for _ in range(s.fresh)]
        config = {"kind": t.kind, "schema": task.workspace.get("db/schema.sql") or SCHEMAS[t.schema].ddl,
                  "datasets": datasets, "reference": t.reference(dict(s.params)), "candidate": sql,
                  "tables": list(t.tables), "inspect": list(t.inspect), "probes": list(t.probes),
                  "timeout_ms": s.timeout_ms, "max_rows": 5000}
        key = new_key()
        pool = self.ctx.pool or default_pool()
        limits = for_task(pool, task, timeout_s=30 + len(datasets) * 2 * s.timeout_ms / 1000, memory_mb=768)
        # the image's own Python, which has Debian's psycopg2: by its path, since `python3` may name another
        # (an exported Harbor task's verifier image puts rlvr's venv first on PATH)
        res = pool.run(["/usr/bin/python3", JUDGE], files={JUDGE: judge_source()},
                       stdin=json.dumps(config) + "\n" + key + "\n", limits=limits)
        timings = {"sandbox": time.perf_counter() - t0, "sandbox_cpu": res.cpu_s}
        if res.status == ExecStatus.infra_error:
            return Verdict.infra(f"the sql sandbox failed: {res.error}", seed=seed, timings=timings)
        payload, forged = authenticate(res.stdout, MARK, key)
        if payload is None:
            # the candidate's SQL runs in the server, never in the judge: a judge that exits with an error of
            # its own (a traceback, not a signal or a limit the query drove it to) is the judge's fault
            crashed = res.status == ExecStatus.exit_nonzero and res.signal is None
            if res.status == ExecStatus.ok or forged or crashed:
                return Verdict.infra(f"the sql judge gave no result ({res.status.value}): "
                                     f"{res.stderr.strip()[-300:]}", seed=seed, timings=timings)
            check = Check(name="run", score=0.0, detail=f"the verification ended early ({res.status.value})")
            return Verdict.from_checks([check], _flags(sql, []), seed=seed, timings=timings)
        if payload.get("infra"):
            return Verdict.infra(f"sql: {payload['infra']}", seed=seed, timings=timings)
        timings["postgres_start"] = payload.get("start_ms", 0.0) / 1000
        return self._judge(t.kind, sql, payload["datasets"], seed, timings)

    def _judge(self, kind: str, sql: str, runs: list[dict[str, Any]], seed: int,
               timings: dict[str, float]) -> Verdict:
        refs = [_result(kind, r["reference"]) for r in runs]
        cands = [_result(kind, r["candidate"]) for r in runs]
        checks = []
        for i, (r, ref, cand) in enumerate(zip(runs, refs, cands)):
            ok = cand is not None and cand == ref
            name = "visible data" if i == 0 else f"fresh data {i}"
            checks.append(Check(name=name, score=float(ok), passed=ok,
                                detail="" if ok else _why(kind, r["reference"], r["candidate"])))
        flags = _flags(sql, [r["candidate"] for r in runs])
        if kind == "migration" and any(_lost(r["reference"], r["candidate"]) for r in runs):
            flags.append(Flag(kind="data_loss", message="the migration dropped rows the reference kept",
                              evidence=[Evidence(file=ANSWER[kind], seen=sql[:200])]))
        if checks[0].passed and len(runs) > 1 and len({json.dumps(c) for c in cands}) == 1 \
                and len({json.dumps(r) for r in refs}) > 1:
            flags.append(Flag(kind="hard_coded", message="the result does not change with the data",
                              evidence=[Evidence(file=ANSWER[kind], seen=sql[:200])]))
        passed = all(c.passed for c in checks) and not flags
        return Verdict(score=1.0 if all(c.passed for c in checks) else 0.0, passed=passed, checks=checks,
                       flags=flags, seed=seed, timings=timings,
                       details={"visible_reference": runs[0]["reference"].get("rows")
                                if kind == "query" else None})
