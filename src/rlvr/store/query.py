"""SQL over a run's episodes with DuckDB: the store's Parquet parts as the view `episodes`."""
from __future__ import annotations

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


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
