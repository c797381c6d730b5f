"""Eval reports: pass@1 and pass@k per domain with bootstrap confidence intervals, why episodes were masked,
and comparisons of two runs.

Every policy evaluated with the same tasks SPEC and seed sees the same tasks, initial states and per-episode
sampling seeds, so two checkpoints or two models are compared on identical work. pass@k is the unbiased
estimator of Chen et al. (2021) from n samples with c passes: 1 - C(n-c, k) / C(n, k), averaged over tasks.
Episodes masked by an infra fault do not count as samples. Intervals are 95% percentile bootstraps over tasks;
a comparison resamples the tasks both runs share, paired.

`rlvr eval` (`rlvr.commands.eval.run_eval`) builds these reports; held-out evaluation during training
(`rlvr.train.heldout`) uses the same estimators.
"""
from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr.atomic import atomic_write
from rlvr.errors import UserError
from rlvr.monitor.metrics import LOOP_RATES, loop_counts
from rlvr.rollout.episode import Episode

EVAL_SCHEMA_VERSION = 1
BOOTSTRAP_ROUNDS = 2000
EVAL_FILE = "eval.json"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (numerically stable product form)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def bootstrap_ci(values: Sequence[float], *, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (resampled with replacement)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return (float("nan"), float("nan"))
    if arr.size == 1 or np.all(arr == arr[0]):
        return (float(arr[0]), float(arr[0]))
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(rounds, arr.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


def task_counts(episodes: Sequence[Episode]) -> dict[str, dict[str, list[int]]]:
    """domain -> task id -> [samples, passes], infra-masked episodes left out."""
    out: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for ep in episodes:
        row = out[ep.domain].setdefault(ep.task_id, [0, 0])
        if ep.masked:
            continue
        row[0] += 1
        row[1] += int(ep.passed)
    return dict(out)


def summarize(counts: dict[str, dict[str, list[int]]], k: int, *, seed: int = 0,
              masked: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """Per-domain n (tasks judged), samples, pass@1, pass@k and their intervals."""
    result: dict[str, dict[str, Any]] = {}
    for domain, tasks in sorted(counts.items()):
        judged = [(n, c) for n, c in tasks.values() if n > 0]
        p1 = [c / n for n, c in judged]
        pk = [pass_at_k(n, c, k) for n, c in judged if n >= k]
        result[domain] = {
            "n": len(judged), "samples": sum(n for n, _ in judged), "k": k,
            "pass@1": float(np.mean(p1)) if p1 else None,
            "pass@1_ci": list(bootstrap_ci(p1, seed=seed)) if p1 else None,
            "pass@k": float(np.mean(pk)) if pk else None,
            "pass@k_ci": list(bootstrap_ci(pk, seed=seed)) if pk else None,
            "tasks_short_of_k": len(judged) - len(pk), "unjudged_tasks": len(tasks) - len(judged),
            "masked_episodes": (masked or {}).get(domain, 0),
        }
    return result


def ratio_ci(num: Sequence[float], den: Sequence[float], *, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0,
             level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of sum(num) / sum(den), the pairs resampled together (per task)."""
    n, d = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if n.size == 0 or d.sum() == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n.size, size=(rounds, n.size))
    dens = d[idx].sum(axis=1)
    ratios = n[idx].sum(axis=1)[dens > 0] / dens[dens > 0]
    lo, hi = np.quantile(ratios, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


def task_loop_counts(episodes: Sequence[Episode]) -> dict[str, dict[str, dict[str, float]]]:
    """domain -> task id -> the loop's counts of its episodes (`rlvr.monitor.metrics.loop_counts`), for the
    tasks with an attempt."""
    by_task: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_task[(ep.domain, ep.task_id)].append(ep)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (domain, task), eps in by_task.items():
        c = loop_counts(eps)
        if c.get("episodes"):
            out[domain][task] = c
    return dict(out)


def loop_summary(episodes: Sequence[Episode], *, seed: int = 0) -> dict[str, Any] | None:
    """The loop's figures of episodes of several turns (`rlvr.monitor.metrics.LOOP_RATES`: first-attempt pass,
    recovery rate, attempts used, ...) with 95% bootstrap intervals over tasks; None when no episode made an
    attempt."""
    counts = [c for tasks in task_loop_counts(episodes).values() for c in tasks.values()]
    if not counts:
        return None
    out: dict[str, Any] = {"episodes": int(sum(c["episodes"] for c in counts)), "tasks": len(counts)}
    for name, (num, den) in LOOP_RATES.items():
        nums, dens = [c.get(num, 0.0) for c in counts], [c.get(den, 0.0) for c in counts]
        if sum(dens) > 0:
            out[name] = sum(nums) / sum(dens)
            out[f"{name}_ci"] = list(ratio_ci(nums, dens, seed=seed))
            out[f"{name}_n"] = int(sum(dens))
    return out


def mask_error(ep: Episode) -> str | None:
    """Why an episode was masked (the verifier's infra error, or the fault that stopped its rollout), or
    None."""
    if ep.verdict is not None and ep.verdict.infra_error is not None:
        return f"verifier: {ep.verdict.infra_error}"
    if ep.masked:
        return f"rollout: {ep.metadata.get('error') or 'infra fault'}"
    return None


_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Timeout|Refused|Exit))\b")


def mask_reason(error: str) -> str:
    """The reason class of a mask error: where it happened and the error's kind (the first exception named in
    it, else the message's first line), so that a thousand refused connections count as one reason."""
    where, _, message = error.partition(": ")
    head = message.strip().splitlines()[0] if message.strip() else "infra fault"
    named = _EXCEPTION.search(head)
    return f"{where}: {named.group(1) if named else head}"


def mask_reasons(episodes: Sequence[Episode]) -> dict[str, int]:
    """Masked episodes counted per reason (`mask_reason`), most frequent first."""
    counts: dict[str, int] = defaultdict(int)
    for ep in episodes:
        error = mask_error(ep)
        if error is not None:
            counts[mask_reason(error)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def first_mask_error(episodes: Sequence[Episode]) -> str | None:
    """The first masked episode's error, in one line."""
    for ep in episodes:
        error = mask_error(ep)
        if error is not None:
            return " ".join(error.split())
    return None


def end_reason(ep: Episode) -> str | None:
    """Why a judged episode that did not pass ended early, or None: a budget that cut it (`truncated by
    context`, `turns`, `tokens`, `wall`), or no model turn at all (an agent that never reached the policy)."""
    if ep.masked or ep.passed:
        return None
    if ep.truncated_by:
        return f"truncated by {ep.truncated_by}"
    if ep.num_turns == 0:
        return "no model turn"
    return None


def end_reasons(episodes: Sequence[Episode]) -> dict[str, dict[str, Any]]:
    """Failed episodes that ended early, per `end_reason` (most frequent first): how many, and the first one's
    refused call (what the gateway answered an agent's call it refused for that budget), if any."""
    out: dict[str, dict[str, Any]] = {}
    for ep in episodes:
        reason = end_reason(ep)
        if reason is None:
            continue
        row = out.setdefault(reason, {"episodes": 0, "refused": None})
        row["episodes"] += 1
        row["refused"] = row["refused"] or ep.metadata.get("refused")
    return dict(sorted(out.items(), key=lambda kv: (-kv[1]["episodes"], kv[0])))


def node_counts(episodes: Sequence[Episode]) -> dict[str, dict[str, int]]:
    """Per Ray node: the episodes that ran there, passed, were masked, and the workspaces lost there (episodes
    that went on elsewhere). Empty when every episode ran on this machine."""
    counts: dict[str, dict[str, int]] = {}

    def at(node: str) -> dict[str, int]:
        return counts.setdefault(node, {"episodes": 0, "passed": 0, "masked": 0, "lost": 0})

    for ep in episodes:
        if ep.node is not None:
            row = at(ep.node)
            row["episodes"] += 1
            row["passed"] += int(ep.passed)
            row["masked"] += int(ep.masked)
        for node in ep.lost_nodes:
            at(node)["lost"] += 1
    return dict(sorted(counts.items()))


def report(episodes: Sequence[Episode], *, k: int, seed: int, policy: str, tasks: str,
           extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The eval report: one JSON-ready object whose `domains` maps each domain to its figures, with the masked
    episodes counted per reason and the first mask error, and the failed episodes that ended early (a budget,
    a refused call, no model turn) counted per reason."""
    counts = task_counts(episodes)
    masked: dict[str, int] = defaultdict(int)
    for ep in episodes:
        masked[ep.domain] += int(ep.masked)
    domains = summarize(counts, k, seed=seed, masked=masked)
    for name, row in domains.items():
        loop = loop_summary([ep for ep in episodes if ep.domain == name], seed=seed)
        if loop is not None:
            row["loop"] = loop
    per_task_loop = task_loop_counts(episodes)
    return {"schema_version": EVAL_SCHEMA_VERSION, "policy": policy, "tasks": tasks, "k": k, "seed": seed,
            "episodes": len(episodes), "masked_episodes": sum(masked.values()),
            "mask_reasons": mask_reasons(episodes), "first_mask_error": first_mask_error(episodes),
            "end_reasons": end_reasons(episodes),
            "nodes": node_counts(episodes), "domains": domains,
            "per_task": counts, **({"per_task_loop": per_task_loop} if per_task_loop else {}),
            **(extra or {})}


def load_report(path: str | Path) -> dict[str, Any]:
    """An eval report from `eval.json` or a directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / EVAL_FILE
    if not p.is_file():
        raise UserError("no eval report here", file=p,
                        fix=f"give an {EVAL_FILE} written by `rlvr eval` or its directory")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"not a JSON eval report ({exc})", file=p,
                        fix="give an eval.json written by `rlvr eval`") from None
    if not isinstance(data, dict) or not isinstance(data.get("domains"), dict):
        raise UserError("not an eval report (no `domains` object)", file=p,
                        fix="give an eval.json written by `rlvr eval`")
    return data


def _paired(a: dict[str, list[int]], b: dict[str, list[int]], k: int, fn: Callable[[int, int], float]
            ) -> tuple[float | None, list[float] | None, int]:
    shared = [t for t in a if t in b and a[t][0] >= k and b[t][0] >= k]
    if not shared:
        return None, None, 0
    diffs = [fn(*b[t]) - fn(*a[t]) for t in shared]
    return float(np.mean(diffs)), list(bootstrap_ci(diffs)), len(shared)


def _paired_ratio(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], num: str, den: str,
                  seed: int = 0) -> tuple[float, list[float]] | None:
    """B's ratio of sums minus A's over the tasks both hold, with a paired bootstrap interval (the same tasks
    resampled for both)."""
    shared = [t for t in a if t in b and a[t].get(den) and b[t].get(den)]
    if not shared:
        return None
    arr = np.array([[x[t].get(num, 0.0), x[t][den]] for t in shared for x in (a, b)]).reshape(len(shared), 4)
    delta = arr[:, 2].sum() / arr[:, 3].sum() - arr[:, 0].sum() / arr[:, 1].sum()
    idx = np.random.default_rng(seed).integers(0, len(shared), size=(BOOTSTRAP_ROUNDS, len(shared)))
    s = arr[idx].sum(axis=1)
    lo, hi = np.quantile(s[:, 2] / s[:, 3] - s[:, 0] / s[:, 1], [0.025, 0.975])
    return float(delta), [float(lo), float(hi)]


def compare_loop(a: dict[str, Any], b: dict[str, Any], domain: str) -> dict[str, Any]:
    """B minus A of the loop's figures of one domain (first-attempt pass, recovery rate, attempts used, ...),
    paired over the tasks both reports hold loop counts for; empty when either has none."""
    ta = (a.get("per_task_loop") or {}).get(domain) or {}
    tb = (b.get("per_task_loop") or {}).get(domain) or {}
    out: dict[str, Any] = {}
    for name, (num, den) in LOOP_RATES.items():
        got = _paired_ratio(ta, tb, num, den)
        if got is not None:
            out[f"delta_{name}"], out[f"delta_{name}_ci"] = got
            out[f"a_{name}"] = ((a["domains"].get(domain) or {}).get("loop") or {}).get(name)
            out[f"b_{name}"] = ((b["domains"].get(domain) or {}).get("loop") or {}).get(name)
    return out


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """B minus A per domain: pass@1 and pass@k differences with paired intervals over shared tasks, and the
    loop's figures where both have them (`compare_loop`)."""
    k = min(int(a.get("k", 1)), int(b.get("k", 1)))
    out: dict[str, Any] = {"k": k, "domains": {}}
    for domain in sorted(set(a["domains"]) | set(b["domains"])):
        ta = (a.get("per_task") or {}).get(domain, {})
        tb = (b.get("per_task") or {}).get(domain, {})
        d1, ci1, shared = _paired(ta, tb, 1, lambda n, c: c / n)
        dk, cik, _ = _paired(ta, tb, k, lambda n, c: pass_at_k(n, c, k))
        ra, rb = a["domains"].get(domain, {}), b["domains"].get(domain, {})
        out["domains"][domain] = {
            "a_pass@1": ra.get("pass@1"), "b_pass@1": rb.get("pass@1"), "delta_pass@1": d1,
            "delta_pass@1_ci": ci1,
            "a_pass@k": ra.get("pass@k"), "b_pass@k": rb.get("pass@k"), "delta_pass@k": dk,
            "delta_pass@k_ci": cik,
            "shared_tasks": shared,
        }
        loop = compare_loop(a, b, domain)
        if loop:
            out["domains"][domain]["loop"] = loop
    return out


def new_eval_dir(root: str | Path = "runs/eval") -> Path:
    """A fresh directory `<root>/<UTC time>[-n]` for one eval."""
    import time

    base = Path(root) / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run_dir, n = base, 1
    while True:
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            n += 1
            run_dir = base.with_name(f"{base.name}-{n}")


def write_report(rep: dict[str, Any], root: str | Path = "runs/eval", *,
                 run_dir: str | Path | None = None) -> Path:
    """Write a report to `<run_dir>/eval.json` (default: a fresh `<root>/<UTC time>/`), atomically."""
    target = Path(run_dir) if run_dir is not None else new_eval_dir(root)
    return atomic_write(target / EVAL_FILE, json.dumps(rep, indent=2) + "\n")
