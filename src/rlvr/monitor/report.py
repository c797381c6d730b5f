"""The run report: one self-contained HTML file (inline CSS, JS and SVG plots; nothing fetched from a
network).

It shows pass-rate curves per domain, reward distributions over time, tool use, flags and alerts linked to
their episodes, failure clusters, sandbox health, and an episode viewer whose transcript shows every turn with
its tool calls and their results, as the model saw them. An eval directory (`rlvr eval`: an `eval.json` beside
the episodes) gets an eval's report instead of learning curves: pass@1 and pass@k per domain with their
intervals, per-task outcomes, masked episodes per reason, tool use per domain, the transcripts, and optionally
a second eval side by side (`rlvr.monitor.evals.compare`). The page is a template shipped with the
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

from rlvr.atomic import atomic_write
from rlvr.envs.dialects import Dialect, of_episode
from rlvr.errors import UserError
from rlvr.monitor.evals import EVAL_FILE, compare, load_report, mask_error, mask_reason, pass_at_k
from rlvr.monitor.metrics import (
    agent_metrics,
    attempt_outcomes,
    is_multi_turn,
    is_tool_error,
    malformed_calls,
    tool_results,
)
from rlvr.monitor.monitor import read_jsonl, read_metrics
from rlvr.rollout.episode import Episode, tool_names
from rlvr.store.episodes import EpisodeStore, open_run
from rlvr.store.failures import cluster, failed_episodes, load_episodes
from rlvr.store.layout import RunLayout
from rlvr.store.query import connect
from rlvr.store.schema import row_to_episode

MAX_VIEWER_EPISODES = 400
"""Episodes embedded for the viewer: every one linked from an alert or cluster first, then a sample per
step."""
MAX_TEXT = 6000
"""Characters kept of each message or file in the viewer (the store keeps them whole)."""
MAX_FRAMES = 4
"""Rendered frames shown per episode."""
MAX_FRAME_BYTES = 256 * 1024
"""Frame files above this size are not inlined."""
MASKED_EXAMPLES = 5
"""Masked episodes linked per mask reason in an eval's report."""
_DATA_MARK = "/*__REPORT_DATA__*/"

# (chart id, section, title, metric prefix or name, y range); series from metrics.jsonl.
_METRIC_CHARTS: list[tuple[str, str, str, list[str], tuple[float, float | None] | None]] = [
    ("heldout", "Learning", "Held-out pass rate", ["heldout/", "eval/"], (0, 1)),
    ("entropy", "Learning", "Policy entropy", ["policy/entropy"], None),
    ("sandbox_latency", "Sandbox health", "Sandbox latency (ms)", ["sandbox/p50_ms", "sandbox/p95_ms"], None),
    ("throughput", "Throughput and timing", "Generated tokens per second", ["policy/tokens_per_s"], None),
    ("idle", "Throughput and timing", "Policy idle fraction", ["policy/idle_fraction"], (0, 1)),
    ("phases", "Throughput and timing", "Phase timings (s)", ["time/"], None),
    ("agent_use", "Episodes", "Tool use per multi-turn episode (calls, turns, to a pass)",
     ["agent/tool_calls_per_episode", "agent/turns_per_episode", "agent/turns_to_pass",
      "agent/run_tests_before_pass", "agent/malformed_calls_per_episode"], (0, None)),
    ("truncation", "Episodes", "Truncated share of episodes, by the budget that cut them", ["truncation/rate",
     "truncation/turns", "truncation/tokens", "truncation/wall", "truncation/context", "truncation/other"],
     (0, 1)),
    ("agent_errors", "Episodes", "Tool errors and episodes without a tool call (share)",
     ["agent/tool_error_rate", "agent/no_tool_call_share"], (0, 1)),
    ("loop", "Learning", "The loop in training episodes of several turns: first attempt passed, recovery "
     "(attempt k passed after k-1 failed), episode passed",
     ["loop/first_attempt_pass", "loop/recovery_rate", "loop/recovery_rate_2", "loop/recovery_rate_3",
      "loop/pass_rate", "loop/pass_after_failure"], (0, 1)),
    ("heldout_loop", "Learning", "The loop on held-out tasks (sampled), at each held-out measurement",
     ["heldout_loop/first_attempt_pass", "heldout_loop/recovery_rate", "heldout_loop/recovery_rate_2",
      "heldout_loop/recovery_rate_3", "heldout_loop/pass_rate", "heldout_loop/pass_after_failure"], (0, 1)),
    ("loop_attempts", "Episodes", "Attempts used per episode of several turns (training, held-out)",
     ["loop/attempts", "heldout_loop/attempts"], (0, None)),
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
        {"id": "flags", "section": "Integrity", "title": "Flagged share of episodes, by kind",
         "yrange": [0, None],
         "series": _series(q(
             "WITH t AS (SELECT step, count(*) AS n FROM episodes GROUP BY 1), "
             "k AS (SELECT step, unnest(flag_kinds) AS kind FROM episodes) "
             "SELECT k.step, k.kind, count(*) / any_value(t.n) FROM k JOIN t USING (step) GROUP BY "
             "ALL ORDER BY 1"))
         + [{"name": "any flag", "dash": True, "points": [list(r) for r in q(
             "SELECT step, avg((num_flags > 0)::DOUBLE) FROM episodes GROUP BY 1 ORDER BY 1")]}]},
        {"id": "length", "section": "Episodes", "title": "Generated tokens per episode (mean and max)",
         "series": _series(q("SELECT step, 'mean', avg(num_generated_tokens) FROM episodes GROUP BY "
                             "1 UNION ALL SELECT step, 'max', max(num_generated_tokens) FROM episodes GROUP "
                             "BY 1 ORDER BY 1"))},
        {"id": "sandbox", "section": "Sandbox health", "title": "Tool executions by status (share)",
         "yrange": [0, 1], "series": _series(q(
             "WITH s AS (SELECT step, unnest(exec_statuses) AS st FROM episodes), "
             "t AS (SELECT step, count(*) AS n FROM s GROUP BY 1) "
             "SELECT s.step, s.st, count(*) / any_value(t.n) FROM s JOIN t USING (step) GROUP BY "
             "ALL ORDER BY 1"))
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


def _calls(m: Any, dialect: Dialect) -> list[dict[str, Any]]:
    """The calls of an assistant message: its native `tool_calls`, else those its text holds, read with the
    episode's tool dialect as the Env read them."""
    if m.role != "assistant":
        return []
    if m.tool_calls:
        return [{"name": c.name, "arguments": c.arguments, "native": True} for c in m.tool_calls]
    return [{"name": c.name, "arguments": c.arguments, "native": False}
            for c in dialect.parse(m.content).calls]


def _viewer_episode(ep: Episode, run: str | None = None) -> dict[str, Any]:
    v = ep.verdict
    results = tool_results(ep)
    dialect = of_episode(ep.metadata)
    return {
        "id": ep.episode_id, "step": ep.step, "task_id": ep.task_id, "domain": ep.domain, "reward": ep.reward,
        "passed": ep.passed, "masked": ep.masked, "status": ep.status, "truncated_by": ep.truncated_by,
        "node": ep.node, "lost_nodes": list(ep.lost_nodes),
        "group_id": ep.group_id, "sample_index": ep.sample_index, "policy_version": ep.policy_version,
        "run": run, "num_turns": ep.num_turns,
        "score": v.score if v else None, "infra_error": v.infra_error if v else None,
        "mask_error": mask_error(ep),
        "checks": [c.model_dump(mode="json") for c in (v.checks if v else [])],
        "flags": [f.model_dump(mode="json") for f in (v.flags if v else [])],
        "messages": [{"role": m.role, "content": _clip(m.content), "name": m.name,
                      "exec_status": m.exec_status,
                      "error": is_tool_error(m), "elided": m.elided, "calls": _calls(m, dialect),
                      "tool_calls": [c.model_dump(mode="json") for c in m.tool_calls]} for m in ep.messages],
        "attempts": attempt_outcomes(ep),
        "agent": {"multi_turn": is_multi_turn(ep), "tool_calls": len(tool_names(ep)),
                  "tool_errors": sum(is_tool_error(m) for m in results),
                  "malformed_calls": malformed_calls(ep),
                  "run_tests": sum(m.name == "run_tests" for m in results)},
        "final_answer": _clip(ep.final_state.answer),
        "files": {k: _clip(t) for k, t in list(ep.final_state.files.items())[:20]},
        "timings": ep.timings,
        "frames": _frames(v.details if v else {}),
    }


def _frames(details: dict[str, Any]) -> list[dict[str, Any]]:
    """Rendered frames a verifier kept (`details["frames"]`: camera, candidate and reference PNG paths, e.g.
    the blender verifier's), inlined as data URIs; files missing here or over MAX_FRAME_BYTES are left out."""
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
    flagged = [r[0] for r in con.execute("SELECT episode_id FROM episodes WHERE num_flags > 0 ORDER BY step")
               .fetchall()]
    steps = con.execute("SELECT count(DISTINCT step) FROM episodes").fetchone()[0] or 1
    per_step = max(2, (MAX_VIEWER_EPISODES - len(ids)) // steps)
    sample = [r[0] for r in con.execute(
        "SELECT episode_id FROM (SELECT episode_id, step, row_number() OVER (PARTITION BY step ORDER "
        "BY passed, "
        f"task_id, sample_index) AS i FROM episodes) WHERE i <= {int(per_step)} ORDER BY step, i").fetchall()]
    for eid in flagged + sample:
        if len(ids) >= MAX_VIEWER_EPISODES:
            break
        if eid not in seen:
            ids.append(eid)
            seen.add(eid)
    return ids


def build_report_data(run_dir: str | Path, store: EpisodeStore | None = None,
                      compare_with: str | Path | None = None) -> dict[str, Any]:
    """Everything the page shows, as one JSON-serialisable document: a training run's, or an eval's (a
    directory holding `eval.json`), with `compare_with` a second eval shown beside it."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    if (run_dir / EVAL_FILE).is_file():
        return _eval_report_data(run_dir, store, compare_with)
    store = store or open_run(run_dir)
    if compare_with is not None:
        raise UserError(f"--compare shows two evals side by side, and this directory holds no {EVAL_FILE}",
                        file=run_dir, fix="give two directories written by `rlvr eval`")
    metrics = read_metrics(layout.metrics)
    alerts = read_jsonl(layout.alerts)
    clusters = [c.to_json() for c in cluster(failed_episodes(store))]
    con = connect(store)
    try:
        n, passed, masked = con.execute(
            "SELECT count(*), sum(passed::INT), sum(masked::INT) FROM episodes").fetchone()
        linked = [e for a in alerts for e in a.get("episode_ids", [])] + [e for c in clusters
                                                                          for e in c["examples"]]
        ids = _viewer_ids(con, [str(e) for e in linked])
        rows = con.sql("SELECT * FROM episodes WHERE episode_id IN (SELECT unnest($ids::VARCHAR[])) "
                       "ORDER BY step, task_id, sample_index",
                       params={"ids": ids}).to_arrow_table().to_pylist()
        charts = _store_charts(con) + _metric_charts(metrics)
    finally:
        con.close()
    return {
        "kind": "train", "run": _run_header(run_dir, store, n, passed, masked), "charts": charts,
        "alerts": alerts,
        "clusters": clusters, "episodes": [_viewer_episode(row_to_episode(r)) for r in rows],
    }


def _run_header(run_dir: Path, store: EpisodeStore, n: int, passed: int | None,
                masked: int | None) -> dict[str, Any]:
    config = RunLayout(run_dir).config
    return {"name": run_dir.resolve().name, "dir": str(run_dir), "store": store.url,
            "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "steps": store.steps(),
            "episodes": n, "passed": passed or 0, "masked": masked or 0,
            "config": config.read_text(encoding="utf-8", errors="replace") if config.is_file() else None}


def _eval_report_data(run_dir: Path, store: EpisodeStore | None,
                      compare_with: str | Path | None) -> dict[str, Any]:
    """An eval's report: its figures from `eval.json`, its episodes from the store beside it."""
    rep = load_report(run_dir)
    store = store or open_run(run_dir)
    eps = load_episodes(store)
    cap = MAX_VIEWER_EPISODES // (1 if compare_with is None else 2)
    section, ids = _eval_section(run_dir, rep, eps, cap)
    clusters = [c.to_json() for c in cluster(e for e in eps if not e.passed)]
    ids = _capped_ids([e for c in clusters for e in c["examples"]][:cap // 4] + ids, cap)
    viewer = [_viewer_episode(e, "A" if compare_with is not None else None) for e in _pick(eps, ids)]
    data: dict[str, Any] = {
        "kind": "eval", "run": _run_header(run_dir, store, len(eps), sum(e.passed for e in eps),
                                           sum(e.masked for e in eps)),
        "charts": [], "alerts": [], "clusters": clusters, "eval": section, "episodes": viewer}
    if compare_with is not None:
        b_dir = Path(compare_with)
        rep_b = load_report(b_dir)
        b_dir = b_dir if b_dir.is_dir() else b_dir.parent
        eps_b = load_episodes(open_run(b_dir))
        section_b, ids_b = _eval_section(b_dir, rep_b, eps_b, cap)
        data["episodes"] += [_viewer_episode(e, "B") for e in _pick(eps_b, ids_b)]
        data["compare"] = {"b": section_b, "diff": compare(rep, rep_b),
                           "tasks": _compare_tasks(section["tasks"], section_b["tasks"])}
    return data


def _pick(eps: list[Episode], ids: list[str]) -> list[Episode]:
    chosen = set(ids)
    return sorted((e for e in eps if e.episode_id in chosen),
                  key=lambda e: (e.domain, e.task_id, e.sample_index))


def _capped_ids(ids: list[str], cap: int) -> list[str]:
    return list(dict.fromkeys(ids))[:cap]


def _eval_section(run_dir: Path, rep: dict[str, Any], eps: list[Episode], cap: int) -> tuple[dict[str, Any],
                                                                                             list[str]]:
    """What the page shows of one eval, and the episodes to embed: a few per mask reason, then every task's
    samples in turn (its first sample of every task, then the second, ...) up to `cap`."""
    k = int(rep.get("k") or 1)
    by_task: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for e in sorted(eps, key=lambda e: (e.sample_index, e.episode_id)):
        by_task[(e.domain, e.task_id)].append(e)
    counts = {(d, t): nc for d, tasks in (rep.get("per_task") or {}).items() for t, nc in tasks.items()}
    tasks = []
    for d, t in sorted(set(counts) | set(by_task)):
        n, c = counts.get((d, t)) or (0, 0)
        group = by_task.get((d, t), [])
        tasks.append({"domain": d, "task_id": t, "samples": n, "passes": c, "pass@1": c / n if n else None,
                      "pass@k": pass_at_k(n, c, k) if n >= k else None,
                      "masked": sum(e.masked for e in group),
                      "episode_ids": [e.episode_id for e in group]})
    examples: dict[str, list[str]] = defaultdict(list)
    for e in eps:
        error = mask_error(e)
        if error is not None and len(examples[mask_reason(error)]) < MASKED_EXAMPLES:
            examples[mask_reason(error)].append(e.episode_id)
    rounds = max((len(g) for g in by_task.values()), default=0)
    round_robin = [g[i].episode_id for i in range(rounds) for g in by_task.values() if i < len(g)]
    ids = _capped_ids([i for v in examples.values() for i in v] + round_robin, cap)
    domains = sorted({e.domain for e in eps})
    agent = {d: m for d in domains if (m := agent_metrics([e for e in eps if e.domain == d]))}
    if len(agent) > 1:
        agent["all"] = agent_metrics(eps)
    keys = ("policy", "k", "seed", "episodes", "planned_episodes", "partial", "stopped", "wall_s",
            "masked_episodes", "mask_reasons", "first_mask_error", "domains", "sampling", "nodes")
    section = {"name": run_dir.resolve().name, "dir": str(run_dir), "tasks_spec": rep.get("tasks"),
               **{key: rep.get(key) for key in keys}, "tasks": tasks, "mask_examples": dict(examples),
               "agent": agent}
    return section, ids


def _compare_tasks(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Both evals' outcome of every task either holds, side by side."""
    ra, rb = ({(r["domain"], r["task_id"]): r for r in rows} for rows in (a, b))
    out = []
    for key in sorted(set(ra) | set(rb)):
        x, y = ra.get(key), rb.get(key)
        pa, pb = (r["pass@1"] if r else None for r in (x, y))
        out.append({"domain": key[0], "task_id": key[1], "a": x, "b": y,
                    "delta_pass@1": pb - pa if pa is not None and pb is not None else None})
    return out


def render_html(data: dict[str, Any]) -> str:
    """The template with the data inlined; `<`, `>` and `&` escaped so no run text can close the script."""
    template = resources.files("rlvr.monitor").joinpath("report.html").read_text(encoding="utf-8")
    blob = json.dumps(data, default=str, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return template.replace(_DATA_MARK, blob, 1)


def write_report(run_dir: str | Path, output: str | Path | None = None, *,
                 compare_with: str | Path | None = None) -> Path:
    """Write `<run_dir>/report.html` (or `output`) and return its path; with `compare_with` (a second eval),
    the two evals side by side, by default in `<run_dir>/compare-<its name>.html`."""
    run_dir = Path(run_dir)
    html = render_html(_sanitize(build_report_data(run_dir, compare_with=compare_with)))
    if output is not None:
        path = Path(output)
    elif compare_with is not None:
        b = Path(compare_with)
        path = run_dir / f"compare-{(b if b.is_dir() else b.parent).resolve().name}.html"
    else:
        path = RunLayout(run_dir).report
    return atomic_write(path, html)


def _sanitize(obj: Any) -> Any:
    """JSON has no NaN or infinity: such values become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    return obj
