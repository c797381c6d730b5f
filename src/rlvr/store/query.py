"""SQL over a run's episodes with DuckDB: the store's Parquet parts as the view `episodes`."""
from __future__ import annotations

import datetime
import math
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa

from rlvr.errors import UserError
from rlvr.store.episodes import EpisodeStore
from rlvr.store.schema import SCHEMA


def connect(store: EpisodeStore) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the view `episodes` (one row per episode_id, the newest write wins)."""
    con = duckdb.connect(":memory:")
    parts = store.parts()
    if not parts:
        # An empty run still answers queries (with no rows) rather than failing on a missing table.
        con.register("_empty_episodes", SCHEMA.empty_table())
        con.execute("CREATE VIEW episodes AS SELECT * FROM _empty_episodes")
        return con
    if not store.storage.is_local:
        # DuckDB reads remote parts through the same fsspec filesystem the store writes with.
        con.register_filesystem(store.storage.fs)
        parts = [store.storage.fs.unstrip_protocol(p) for p in parts]
    files = "[" + ", ".join(_sql_str(p) for p in parts) + "]"
    con.execute(
        "CREATE VIEW episodes AS SELECT * EXCLUDE (filename) FROM read_parquet("
        f"{files}, filename=true, union_by_name=true, hive_partitioning=false) "
        "QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY filename DESC) = 1")
    return con


def query(store: EpisodeStore, sql: str) -> pa.Table:
    """Run one SQL statement over `episodes` and return its result; a bad statement is a UserError."""
    if not sql.strip():
        raise UserError("empty SQL", fix='e.g. "SELECT domain, avg(passed::int) FROM episodes GROUP BY 1"')
    con = connect(store)
    try:
        rel = con.sql(sql)
        return pa.table({}) if rel is None else rel.to_arrow_table()
    except duckdb.Error as exc:
        first = " ".join(str(exc).split())
        raise UserError(f"SQL error: {first[:400]}",
                        fix="query the table `episodes`; see its columns with DESCRIBE episodes") from None
    finally:
        con.close()


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """A result's rows as JSON values: numbers stay numbers. DuckDB sums integers as HUGEINT and keeps DECIMAL
    columns, which reach Python as `Decimal`; those become an int (no fractional digits) or a float.
    Timestamps, dates and times become ISO 8601 strings; a NaN or infinite float, which JSON cannot hold,
    becomes null."""
    return [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
