"""Trusted judge of the sql domain (a standalone script: the image's Python and psycopg2, nothing of rlvr's).

Copied into a fresh verification sandbox and run as `python judge/judge.py`; stdin carries the config (one
JSON line: the schema, the datasets, the reference and the candidate's SQL, what to inspect) and then the key
that signs its one result line. It starts this job's PostgreSQL server from the image's template cluster
(`pg-start`), then for each dataset, reference first:

1. drops whatever the role `agent` owns and resets its settings (as the superuser, before any SQL of the
   candidate's exists in the database: nothing of theirs can run with the superuser's rights);
2. loads the schema and the dataset as `agent`;
3. runs the SQL as `agent` over its own login (never a SET ROLE it could reset), under a statement time-out: a
   query inside a read-only transaction, its rows fetched; a migration in one transaction, then the columns of
   its tables, the inspection queries and the probes (each alone, rolled back), all as `agent`.

The candidate's SQL never runs with more than `agent`'s rights, and what it leaves behind is dropped before
the next dataset's reference runs. The result line reports each side's rows or error; the verifier compares.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import hashlib
import hmac
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal

MARK = "RLVR-SQL-RESULT"
PG_START = "/opt/rlvr-pg/bin/pg-start"
"""The image's server start, by its path: a pool that scrubs PATH (an exported task's judge) leaves the
image's out."""

try:
    import psycopg2
except ImportError:  # the image lacks it: an infra fault, reported as such
    psycopg2 = None


def undumpable() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except OSError:
        pass


def norm(v: object) -> object:
    """A value as JSON, numbers of every type alike (3, 3.0 and 3.00 are one number)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, float, Decimal)):
        d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
        if d.is_finite():
            d = d.quantize(Decimal("0.000001")).normalize()
        return ["n", format(d, "f")]
    if isinstance(v, (dt.date, dt.datetime, dt.time)):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    return str(v)


def connect(user: str):
    conn = psycopg2.connect(host="/tmp", dbname="app", user=user)
    conn.autocommit = True
    return conn


def error(exc: Exception) -> str:
    code = getattr(exc, "pgcode", None) or type(exc).__name__
    text = (getattr(exc, "pgerror", None) or str(exc)).strip().splitlines()
    return f"{code}: {text[0] if text else ''}"[:300]


def fetch(cur, limit: int) -> list | None:
    if cur.description is None:
        return None
    return [[norm(v) for v in row] for row in cur.fetchmany(limit + 1)]


def prepare(su, cfg: dict, data: str) -> None:
    """A clean database holding the schema and `data`, owned by agent."""
    cur = su.cursor()
    cur.execute("DROP OWNED BY agent CASCADE")  # its privileges too: granted again below
    cur.execute("GRANT CREATE, USAGE ON SCHEMA public TO agent")
    cur.execute("ALTER ROLE agent RESET ALL")
    cur.execute("ALTER ROLE agent IN DATABASE app RESET ALL")
    with connect("agent") as conn:
        conn.cursor().execute(cfg["schema"] + "\n" + data)
    conn.close()


@contextlib.contextmanager
def agent(cfg: dict) -> Iterator:
    """A cursor of a fresh login as `agent`, under the statement time-out; closed on exit."""
    conn = connect("agent")
    try:
        cur = conn.cursor()
        cur.execute(f"SET statement_timeout = {int(cfg['timeout_ms'])}")
        yield cur
    finally:
        conn.close()


def run_query(cfg: dict, sql: str) -> dict:
    try:
        with agent(cfg) as cur:
            cur.execute("BEGIN READ ONLY")
            cur.execute(sql)
            return {"ok": True, "rows": fetch(cur, cfg["max_rows"]), "columns": len(cur.description or ())}
    except psycopg2.Error as exc:
        return {"ok": False, "error": error(exc)}


def inspect(cfg: dict) -> dict:
    with agent(cfg) as cur:
        cur.execute("SELECT table_name, column_name, data_type, is_nullable, numeric_precision, "
                    "numeric_scale FROM information_schema.columns WHERE table_schema = 'public' "
                    "AND table_name = ANY(%s) ORDER BY 1, 2", (cfg["tables"],))
        out = {"columns": fetch(cur, 10_000), "inspect": [], "probes": []}
        for sql in cfg["inspect"]:
            cur.execute(sql)
            out["inspect"].append(fetch(cur, cfg["max_rows"]))
        for sql in cfg["probes"]:
            cur.execute("BEGIN")
            try:
                cur.execute(sql)
                out["probes"].append(["ok", fetch(cur, 100)])
            except psycopg2.Error as exc:
                out["probes"].append(["error", exc.pgcode])
            finally:
                cur.execute("ROLLBACK")
        return out


def run_migration(cfg: dict, sql: str) -> dict:
    try:
        with agent(cfg) as cur:
            cur.execute("BEGIN")
            try:
                cur.execute(sql)
            except psycopg2.ProgrammingError as exc:
                if "empty query" not in str(exc):
                    raise
            cur.execute("COMMIT")
    except psycopg2.Error as exc:
        return {"ok": False, "error": error(exc)}
    try:
        return {"ok": True, **inspect(cfg)}
    except psycopg2.Error as exc:  # an inspection its schema breaks: judged as that side's result
        return {"ok": False, "error": "inspection: " + error(exc)}


def judge(cfg: dict) -> dict:
    t0 = time.monotonic()
    started = subprocess.run([PG_START], capture_output=True, text=True, check=False)
    out: dict = {"start_ms": round((time.monotonic() - t0) * 1000, 1), "datasets": []}
    if started.returncode != 0:
        return {**out, "infra": "PostgreSQL did not start: " + started.stderr.strip()[-400:]}
    side = run_query if cfg["kind"] == "query" else run_migration
    su = connect("postgres")
    for i, data in enumerate(cfg["datasets"]):
        got = {}
        for who in ("reference", "candidate"):
            try:
                prepare(su, cfg, data)
            except psycopg2.Error as exc:
                if who == "reference":
                    return {**out, "infra": f"dataset {i} did not load: {error(exc)}"}
                got[who] = {"ok": False, "error": "the database could not be reset after the candidate's "
                                                  "SQL: "
                                                  + error(exc)}
                continue
            got[who] = side(cfg, cfg[who])
            if who == "reference" and not got[who]["ok"]:
                return {**out, "infra": f"the reference failed on dataset {i}: {got[who]['error']}"}
        out["datasets"].append(got)
    out["total_ms"] = round((time.monotonic() - t0) * 1000, 1)
    return out


def main() -> int:
    undumpable()
    cfg = json.loads(sys.stdin.readline())
    key = sys.stdin.readline().strip().encode()
    if psycopg2 is None:
        payload: dict = {"infra": "psycopg2 is missing from the image"}
    else:
        try:
            payload = judge(cfg)
        except psycopg2.OperationalError as exc:
            payload = {"infra": "the server failed: " + error(exc)}
    body = json.dumps(payload, separators=(",", ":"))
    sys.stdout.write(f"{MARK} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()} {body}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
