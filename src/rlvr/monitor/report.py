"""The run report: one self-contained HTML file (inline CSS, JS and SVG plots; nothing fetched from a network).

It shows pass-rate curves per domain, reward distributions over time, flags and alerts linked to their
episodes, failure clusters, sandbox health, and an episode viewer. The page is a template shipped with the
package (`report.html`) plus the run's data as one inline JSON document; every text from a run is inserted
as text by the page's script, never as markup.
"""
from __future__ import annotations

import base64
import json
import math
import time
from collections import defaultdict
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from rlvr.monitor.monitor import read_jsonl, read_metrics
from rlvr.store.episodes import EpisodeStore, open_run
from rlvr.store.failures import cluster, failed_episodes
from rlvr.store.layout import RunLayout
from rlvr.store.query import connect
from rlvr.store.schema import row_to_episode

MAX_VIEWER_EPISODES = 400
"""Episodes embedded for the viewer: every one linked from an alert or cluster first, then a sample per step."""
MAX_TEXT = 6000
"""Characters kept of each message or file in the viewer (the store keeps them whole)."""
MAX_FRAMES = 4
"""Rendered frames shown per episode."""
MAX_FRAME_BYTES = 256 * 1024
"""Frame files above this size are not inlined."""
_DATA_MARK = "/*__REPORT_DATA__*/"

# (chart id, section, title, metric prefix or name, y range); series from metrics.jsonl.
_METRIC_CHARTS: list[tuple[str, str, str, list[str], tuple[float, float] | None]] = [
    ("heldout", "Learning", "Held-out pass rate", ["heldout/", "eval/"], (0, 1)),
    ("entropy", "Learning", "Policy entropy", ["policy/entropy"], None),
    ("sandbox_latency", "Sandbox health", "Sandbox latency (ms)", ["sandbox/p50_ms", "sandbox/p95_ms"], None),
    ("throughput", "Throughput and timing", "Generated tokens per second", ["policy/tokens_per_s"], None),
    ("idle", "Throughput and timing", "Policy idle fraction", ["policy/idle_fraction"], (0, 1)),
    ("phases", "Throughput and timing", "Phase timings (s)", ["time/"], None),
]


def _series(rows: list[tuple], x: int = 0, name: int = 1, y: int = 2) -> list[dict[str, Any]]:
    by: dict[str, list[list[float]]] = defaultdict(list)
    for r in rows:
        if r[y] is not None:
            by[str(r[name])].append([r[x], float(r[y])])
    return [{"name": k, "points": v} for k, v in sorted(by.items())]


def _store_charts(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    q = lambda sql: con.execute(sql).fetchall()
    charts = [
        {"id": "pass_rate", "section": "Learning", "title": "Pass rate per domain", "yrange": [0, 1],
         "series": _series(q("SELECT step, domain, avg(passed::DOUBLE) FROM episodes WHERE NOT masked "
                             "GROUP BY ALL ORDER BY step")) +
         [{"name": "all", "dash": True, "points": [list(r) for r in q(
             "SELECT step, avg(passed::DOUBLE) FROM episodes WHERE NOT masked GROUP BY 1 ORDER BY 1")]}]},
        {"id": "reward", "section": "Learning", "title": "Reward distribution (p10-p90, p25-p75, median)",
         "kind": "band", "rows": [list(r) for r in q(
             "SELECT step, quantile_cont(reward, 0.1), quantile_cont(reward, 0.25), median(reward), "
             "quantile_cont(reward, 0.75), quantile_cont(reward, 0.9), avg(reward) FROM episodes "
             "WHERE NOT masked GROUP BY 1 ORDER BY 1")]},
        {"id": "flags", "section": "Integrity", "title": "Flagged share of episodes, by kind", "yrange": [0, None],
         "series": _series(q(
             "WITH t AS (SELECT step, count(*) AS n FROM episodes GROUP BY 1), "
             "k AS (SELECT step, unnest(flag_kinds) AS kind FROM episodes) "
             "SELECT k.step, k.kind, count(*) / any_value(t.n) FROM k JOIN t USING (step) GROUP BY ALL ORDER BY 1"))
         + [{"name": "any flag", "dash": True, "points": [list(r) for r in q(
             "SELECT step, avg((num_flags > 0)::DOUBLE) FROM episodes GROUP BY 1 ORDER BY 1")]}]},
        {"id": "length", "section": "Episodes", "title": "Generated tokens per episode (mean and max)",
         "series": _series(q("SELECT step, 'mean', avg(num_generated_tokens) FROM episodes GROUP BY 1 UNION ALL "
                             "SELECT step, 'max', max(num_generated_tokens) FROM episodes GROUP BY 1 ORDER BY 1"))},
        {"id": "sandbox", "section": "Sandbox health", "title": "Tool executions by status (share)",
         "yrange": [0, 1], "series": _series(q(
             "WITH s AS (SELECT step, unnest(exec_statuses) AS st FROM episodes), "
             "t AS (SELECT step, count(*) AS n FROM s GROUP BY 1) "
             "SELECT s.step, s.st, count(*) / any_value(t.n) FROM s JOIN t USING (step) GROUP BY ALL ORDER BY 1"))
         + [{"name": "masked episodes (infra)", "dash": True, "points": [list(r) for r in q(
             "SELECT step, avg(masked::DOUBLE) FROM episodes GROUP BY 1 ORDER BY 1")]}]},
    ]
    return charts


def _metric_charts(metrics: dict[int, dict[str, float]]) -> list[dict[str, Any]]:
    charts = []
    for cid, section, title, names, yr in _METRIC_CHARTS:
        by: dict[str, list[list[float]]] = defaultdict(list)
        for step in sorted(metrics):
            for k, v in metrics[step].items():
                if any(k == n or (n.endswith("/") and k.startswith(n)) for n in names):
                    by[k].append([step, v])
        if by:
            charts.append({"id": cid, "section": section, "title": title, "yrange": list(yr) if yr else None,
                           "series": [{"name": k, "points": v} for k, v in sorted(by.items())]})
    return charts


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n... [{len(text) - MAX_TEXT} more characters in the store]"


def _viewer_episode(row: dict[str, Any]) -> dict[str, Any]:
    ep = row_to_episode(row)
    v = ep.verdict
    return {
        "id": ep.episode_id, "step": ep.step, "task_id": ep.task_id, "domain": ep.domain, "reward": ep.reward,
        "passed": ep.passed, "masked": ep.masked, "status": ep.status, "truncated_by": ep.truncated_by,
        "group_id": ep.group_id, "sample_index": ep.sample_index, "policy_version": ep.policy_version,
        "score": v.score if v else None, "infra_error": v.infra_error if v else None,
        "checks": [c.model_dump(mode="json") for c in (v.checks if v else [])],
        "flags": [f.model_dump(mode="json") for f in (v.flags if v else [])],
        "messages": [{"role": m.role, "content": _clip(m.content), "name": m.name, "exec_status": m.exec_status,
                      "tool_calls": [c.model_dump(mode="json") for c in m.tool_calls]} for m in ep.messages],
        "final_answer": _clip(ep.final_state.answer),
        "files": {k: _clip(t) for k, t in list(ep.final_state.files.items())[:20]},
        "timings": ep.timings,
        "frames": _frames(v.details if v else {}),
    }


def _frames(details: dict[str, Any]) -> list[dict[str, Any]]:
    """Rendered frames a verifier kept (`details["frames"]`: camera, candidate and reference PNG paths, e.g. the
    blender verifier's), inlined as data URIs; files missing here or over MAX_FRAME_BYTES are left out."""
    out = []
    for frame in list(details.get("frames") or [])[:MAX_FRAMES]:
        row: dict[str, Any] = {"camera": frame.get("camera")} if isinstance(frame, dict) else {}
        for who in ("candidate", "reference"):
            path = Path(str(frame.get(who, ""))) if isinstance(frame, dict) else Path()
            if path.suffix == ".png" and path.is_file() and path.stat().st_size <= MAX_FRAME_BYTES:
                row[who] = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
        if len(row) > 1:
            out.append(row)
    return out


def _viewer_ids(con: duckdb.DuckDBPyConnection, linked: list[str]) -> list[str]:
    """Linked episodes first, then flagged ones, then an even sample over steps, up to the cap."""
    ids = list(dict.fromkeys(linked))[:MAX_VIEWER_EPISODES]
    seen = set(ids)
    flagged = [r[0] for r in con.execute("SELECT episode_id FROM episodes WHERE num_flags > 0 ORDER BY step").fetchall()]
    steps = con.execute("SELECT count(DISTINCT step) FROM episodes").fetchone()[0] or 1
    per_step = max(2, (MAX_VIEWER_EPISODES - len(ids)) // steps)
    sample = [r[0] for r in con.execute(
        "SELECT episode_id FROM (SELECT episode_id, step, row_number() OVER (PARTITION BY step ORDER BY passed, "
        f"task_id, sample_index) AS i FROM episodes) WHERE i <= {int(per_step)} ORDER BY step, i").fetchall()]
    for eid in flagged + sample:
        if len(ids) >= MAX_VIEWER_EPISODES:
            break
        if eid not in seen:
            ids.append(eid)
            seen.add(eid)
    return ids


def build_report_data(run_dir: str | Path, store: EpisodeStore | None = None) -> dict[str, Any]:
    """Everything the page shows, as one JSON-serialisable document."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    store = store or open_run(run_dir)
    metrics = read_metrics(layout.metrics)
    alerts = read_jsonl(layout.alerts)
    clusters = [c.to_json() for c in cluster(failed_episodes(store))]
    con = connect(store)
    try:
        n, passed, masked = con.execute(
            "SELECT count(*), sum(passed::INT), sum(masked::INT) FROM episodes").fetchone()
        linked = [e for a in alerts for e in a.get("episode_ids", [])] + [e for c in clusters for e in c["examples"]]
        ids = _viewer_ids(con, [str(e) for e in linked])
        rows = con.sql("SELECT * FROM episodes WHERE episode_id IN (SELECT unnest($ids::VARCHAR[])) "
                       "ORDER BY step, task_id, sample_index", params={"ids": ids}).to_arrow_table().to_pylist()
        charts = _store_charts(con) + _metric_charts(metrics)
    finally:
        con.close()
    config = layout.config
    return {
        "run": {"name": run_dir.resolve().name, "dir": str(run_dir), "store": store.url,
                "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "steps": store.steps(),
                "episodes": n, "passed": passed or 0, "masked": masked or 0,
                "config": config.read_text(encoding="utf-8", errors="replace") if config.is_file() else None},
        "charts": charts, "alerts": alerts, "clusters": clusters,
        "episodes": [_viewer_episode(r) for r in rows],
    }


def render_html(data: dict[str, Any]) -> str:
    """The template with the data inlined; `<`, `>` and `&` escaped so no run text can close the script."""
    template = resources.files("rlvr.monitor").joinpath("report.html").read_text(encoding="utf-8")
    blob = json.dumps(data, default=str, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return template.replace(_DATA_MARK, blob, 1)


def write_report(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Write `<run_dir>/report.html` (or `output`) and return its path."""
    run_dir = Path(run_dir)
    html = render_html(_sanitize(build_report_data(run_dir)))
    path = Path(output) if output is not None else RunLayout(run_dir).report
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path


def _sanitize(obj: Any) -> Any:
    """JSON has no NaN or infinity: such values become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    return obj
