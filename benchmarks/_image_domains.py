"""The image domains' part of bench_domains.py: verification per tier, gold episodes at a terminal, and a
PostgreSQL start from the template cluster beside a fresh initdb and start (see bench_domains.py)."""
from __future__ import annotations

import shutil
import statistics
import time
from typing import Any

from rlvr.config import RolloutConfig
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies.gold import GOLD_SAMPLING, plan_for, play
from rlvr.sandbox import environment_of, in_environment, make_pool
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.result import ExecLimits
from rlvr.sandbox.tree import TREE, restore
from rlvr.tasks import registry
from rlvr.tasks.spec import Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.base import verify as run_verify
from rlvr.verify.scorer import Scorer

DOMAINS = ("c", "sql", "shell")
PG_RUNS = 5
PG = r"""
now() { date +%s%N; }
BIN=/usr/lib/postgresql/15/bin
for k in $(seq {runs}); do
  t0=$(now); pg-start >/dev/null || exit 1; t1=$(now)
  $BIN/pg_ctl -D /tmp/rlvr-pg -m immediate stop >/dev/null 2>&1; rm -rf /tmp/rlvr-pg /tmp/.s.PGSQL.5432*
  t2=$(now)
  $BIN/initdb -D /tmp/fresh -U postgres -A trust -E UTF8 --locale=C --no-instructions --no-sync >/dev/null
  $BIN/pg_ctl -D /tmp/fresh -o "-c listen_addresses= -c unix_socket_directories=/tmp -c fsync=off" -w \
      -l /tmp/fresh.log start >/dev/null
  t3=$(now)
  $BIN/pg_ctl -D /tmp/fresh -m immediate stop >/dev/null 2>&1; rm -rf /tmp/fresh
  echo "$(( (t1 - t0) / 1000 )) $(( (t3 - t2) / 1000 ))"
done
"""
OWN_CHECK = {"c": ["make", "-s", "test"], "sql": ["psql", "-X", "-q", "-f", "query.sql"],
             "shell": ["ls", "-R"]}
"""The candidate's own check of a gold state, in the same image: the baseline of a verification."""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def _own_check(pool: SandboxPool, task: Task, files: dict[str, str]) -> float:
    view = in_environment(pool, **environment_of(task))
    if task.domain == "sql" and "query.sql" not in files:
        files = {**files, "query.sql": "SELECT 1;\n"}  # a migration task: the server's start and seed alone
    t0 = time.perf_counter()
    with view.lease(files) as sb:
        if TREE in files:
            restore(sb)
        sb.run(OWN_CHECK[task.domain], limits=ExecLimits(timeout_s=120))
    return (time.perf_counter() - t0) * 1000


def verification(pool: SandboxPool, domain: str, per_tier: int) -> list[dict[str, Any]]:
    rows = []
    src = registry.make(domain)
    for tier in ("easy", "medium", "hard"):
        tasks = registry.make(domain, tier=tier, seed=100).sample(per_tier)
        run_verify(tasks[0], src.gold(tasks[0]), VerifyContext(pool=pool))  # the image's pool started first
        ours, cpu, own = [], [], []
        for task in tasks:
            t0 = time.perf_counter()
            verdict = run_verify(task, src.gold(task), VerifyContext(pool=pool, seed=1))
            ours.append((time.perf_counter() - t0) * 1000)
            cpu.append(verdict.timings.get("sandbox_cpu", 0.0) * 1000)
            assert verdict.passed, (task.key, verdict.infra_error, [c.detail for c in verdict.checks])
            own.append(_own_check(pool, task, src.gold(task).files))
        rows.append({"domain": domain, "tier": tier, "tasks": len(tasks), "verify_p50_ms": _pct(ours, 0.5),
                     "verify_p99_ms": _pct(ours, 0.99), "verify_cpu_p50_ms": _pct(cpu, 0.5),
                     "own_check_p50_ms": _pct(own, 0.5),
                     "ratio": round(statistics.median(ours) / statistics.median(own), 2)})
    return rows


def episodes(pool: SandboxPool, domain: str, n: int) -> dict[str, Any]:
    tasks = registry.make(domain, seed=200).sample(n)
    played = play([plan_for(t) for t in tasks],
                  lambda policy: EnvRollouts(policy, pool, Scorer(pool), config=RolloutConfig(),
                                             sampling=GOLD_SAMPLING))
    walls = [ep.timings.get("total", 0.0) * 1000 for ep in played]
    return {"domain": domain, "gold_episodes": len(played), "of": n, "episode_p50_ms": _pct(walls, 0.5),
            "episode_p99_ms": _pct(walls, 0.99)}


def postgres_start(pool: SandboxPool) -> dict[str, Any]:
    task = registry.make("sql").get(0)
    res = in_environment(pool, **environment_of(task)).run(["bash", "-c", PG.replace("{runs}", str(PG_RUNS))],
                                                          limits=ExecLimits(timeout_s=300))
    pairs = [tuple(int(x) / 1000 for x in line.split()) for line in res.stdout.split("\n") if line.strip()]
    if res.exit_code != 0 or not pairs:
        return {"postgres_error": (res.stderr or res.error or "")[-300:]}
    template, fresh = [p[0] for p in pairs], [p[1] for p in pairs]
    return {"postgres_runs": len(pairs), "template_start_p50_ms": round(statistics.median(template), 1),
            "initdb_start_p50_ms": round(statistics.median(fresh), 1),
            "speedup": round(statistics.median(fresh) / statistics.median(template), 1)}


def bench_images_domains(per_tier: int, quiet: bool = False) -> list[dict[str, Any]]:
    """Every measurement of the image domains, or one row saying why there are none."""
    if shutil.which("podman") is None:
        return [{"image_domains": "skipped: podman is missing (make images)"}]
    rows: list[dict[str, Any]] = []
    with make_pool(workers=2) as pool:
        for domain in DOMAINS:
            if not quiet:
                print(f"image domain {domain} ...", flush=True)
            rows += verification(pool, domain, per_tier)
            rows.append(episodes(pool, domain, per_tier))
        rows.append(postgres_start(pool))
    return rows


def print_images(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'domain':8} {'tier':7} {'tasks':>5} {'verify p50':>11} {'p99':>8} {'cpu p50':>8} "
          f"{'own check p50':>14} {'ratio':>6}")
    for r in rows:
        if "tier" in r:
            print(f"{r['domain']:8} {r['tier']:7} {r['tasks']:>5} {r['verify_p50_ms']:>9.1f}ms "
                  f"{r['verify_p99_ms']:>6.1f}ms {r['verify_cpu_p50_ms']:>6.1f}ms "
                  f"{r['own_check_p50_ms']:>12.1f}ms {r['ratio']:>6}")
    for r in rows:
        if "gold_episodes" in r:
            print(f"{r['domain']:8} gold episodes {r['gold_episodes']}/{r['of']}: p50 {r['episode_p50_ms']} "
                  "ms, "
                  f"p99 {r['episode_p99_ms']} ms")
        elif "template_start_p50_ms" in r:
            print(f"postgres start: template {r['template_start_p50_ms']} ms, fresh initdb + start "
                  f"{r['initdb_start_p50_ms']} ms ({r['speedup']}x), {r['postgres_runs']} runs each")
        elif "postgres_error" in r or "image_domains" in r:
            print(next(iter(r.values())))
