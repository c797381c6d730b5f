"""EpisodeStore: every episode of a run in Parquet, one folder per step, each write committed atomically.

Layout under the store's URL (rlvr.store.layout names the folders)::

    episodes/step=00000042/part-<unix-ns>-<random>.parquet

A write serialises the batch to Parquet in memory, puts it to a temporary object and renames it into place,
so a reader sees the whole part or none of it, and a writer killed at any point leaves only ignorable
temporaries behind. `write` returns only after the rename: what it acknowledged is on disk. Writing the same
step twice (a resumed run) adds a part; readers keep the newest row of each `episode_id`.
"""
from __future__ import annotations

import io
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import tomllib

from rlvr.atomic import is_temporary
from rlvr.errors import UserError
from rlvr.rollout.episode import Episode
from rlvr.store.layout import EPISODES_DIR, RunLayout, parse_step_dir, step_dir
from rlvr.store.schema import SCHEMA, episodes_to_table, row_to_episode
from rlvr.store.storage import TEMP_DIR, Storage

_PART = re.compile(r"^part-\d+-[0-9a-f]+\.parquet$")


class EpisodeStore:
    """The trajectory store of one run, at a local path or any fsspec URL (`s3://bucket/run`)."""

    def __init__(self, url: str | Path, *, storage_options: dict[str, Any] | None = None,
                 compression: str = "zstd") -> None:
        self.storage = Storage(str(url), dict(storage_options or {}))
        self.url = str(url)
        self.compression = compression

    # ------------------------------------------------------------------------------------------------ write
    def write(self, step: int, episodes: Sequence[Episode]) -> str | None:
        """Commit one batch of episodes under `step`; returns the part's path (None for an empty batch)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        eps = list(episodes)
        if not eps:
            return None
        bad = [type(e).__name__ for e in eps if not isinstance(e, Episode)]
        if bad:
            raise TypeError(f"EpisodeStore.write takes Episode records, got {bad[0]}")
        # The partition is the truth for the step; an episode built without one is filed where it was written.
        eps = [e if e.step == step else e.model_copy(update={"step": step}) for e in eps]
        buf = io.BytesIO()
        pq.write_table(episodes_to_table(eps), buf,
                       compression=None if self.compression == "none" else self.compression)
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
        return self.storage.put_bytes(f"{EPISODES_DIR}/{step_dir(step)}/{name}", buf.getvalue())

    # ------------------------------------------------------------------------------------------------- read
    def parts(self, steps: Iterable[int] | None = None) -> list[str]:
        """Committed Parquet parts (filesystem paths), oldest first within each step, steps ascending."""
        wanted = None if steps is None else {int(s) for s in steps}
        found: list[tuple[int, str]] = []
        for sdir in self.storage.listdir(EPISODES_DIR):
            step = parse_step_dir(sdir)
            if step is None or (wanted is not None and step not in wanted):
                continue
            for name in self.storage.listdir(f"{EPISODES_DIR}/{sdir}"):
                if _PART.match(name):
                    found.append((step, self.storage.path(f"{EPISODES_DIR}/{sdir}/{name}")))
        found.sort()
        return [p for _, p in found]

    def steps(self) -> list[int]:
        """Steps with at least one committed part, ascending."""
        return sorted({s for p in self.parts() if (s := parse_step_dir(p.split("/")[-2])) is not None})

    def read(self, steps: Iterable[int] | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """The episodes table (all steps, or the given ones), one row per episode_id (the newest write)."""
        if columns is not None:
            unknown = [c for c in columns if c not in SCHEMA.names]
            if unknown:
                raise UserError(f"unknown episode column {unknown[0]!r}",
                                fix=f"columns are: {', '.join(SCHEMA.names)}")
        want = list(columns) if columns is not None else None
        read_cols = want if want is None or "episode_id" in want else [*want, "episode_id"]
        tables = [self._read_part(p, read_cols) for p in self.parts(steps)]
        if not tables:
            empty = SCHEMA.empty_table()
            return empty.select(want) if want is not None else empty
        table = pa.concat_tables(tables, promote_options="default")
        table = _newest_per_episode(table)
        return table.select(want) if want is not None else table

    def episodes(self, steps: Iterable[int] | None = None) -> list[Episode]:
        """The stored episodes as Episode records, in write order."""
        return [row_to_episode(r) for r in self.read(steps).to_pylist()]

    def _read_part(self, path: str, columns: list[str] | None) -> pa.Table:
        wanted = columns if columns is not None else SCHEMA.names
        try:
            with self.storage.fs.open(path, "rb") as f:
                pf = pq.ParquetFile(f)
                present = set(pf.schema_arrow.names)
                table = pf.read(columns=[c for c in wanted if c in present])
        except (pa.ArrowException, OSError) as exc:
            # Commits are atomic, so a part that does not parse was damaged or put there from outside.
            raise UserError(f"unreadable episode part: {' '.join(str(exc).split())[:200]}", file=path,
                            fix=f"move the damaged part out of the store's {EPISODES_DIR}/ folder") from None
        # Older parts may lack newer columns: add them as nulls so every part has the current schema.
        for name in wanted:
            if name not in present:
                fld = SCHEMA.field(name)
                table = table.append_column(fld, pa.nulls(table.num_rows, fld.type))
        return table.select(wanted)

    # -------------------------------------------------------------------------------------------- upkeep
    def clean_temp(self) -> int:
        """Remove temporaries left by writers that died before committing; returns how many. Not while
        writing."""
        removed = 0
        for sdir in self.storage.listdir(EPISODES_DIR):
            for name in self.storage.listdir(f"{EPISODES_DIR}/{sdir}"):
                if is_temporary(name):
                    self.storage.delete(f"{EPISODES_DIR}/{sdir}/{name}")
                    removed += 1
        for name in self.storage.listdir(TEMP_DIR):
            self.storage.delete(f"{TEMP_DIR}/{name}")
            removed += 1
        return removed

    def __repr__(self) -> str:
        return f"EpisodeStore({self.url!r})"


def _newest_per_episode(table: pa.Table) -> pa.Table:
    ids = table.column("episode_id").to_pylist()
    if len(set(ids)) == len(ids):
        return table
    last: dict[str, int] = {}
    for i, eid in enumerate(ids):
        last[eid] = i
    keep = sorted(last.values())
    return table.take(pa.array(keep, type=pa.int64()))


def open_run(run: str | Path) -> EpisodeStore:
    """The store of a run: `[store] url` from its config.toml when set, else the run directory itself.

    Raises UserError when a local run directory does not exist.
    """
    run_s = str(run)
    if "://" not in run_s:
        path = Path(run_s)
        if not path.is_dir():
            raise UserError("no such run directory", file=path,
                            fix="give the run directory (e.g. runs/quickstart)")
        cfg = RunLayout(path).config
        if cfg.is_file():
            try:
                section = tomllib.loads(cfg.read_text(encoding="utf-8")).get("store", {})
            except tomllib.TOMLDecodeError as exc:
                raise UserError(f"TOML syntax error: {exc}", file=cfg, fix="fix the syntax") from None
            if isinstance(section, dict) and section.get("url"):
                return EpisodeStore(section["url"], storage_options=section.get("storage_options") or {})
    return EpisodeStore(run_s)
