"""The OpenEnv server (`rlvr serve`) against the in-process Env, in one run, on the same work.

Each episode is a multi-turn code task (`code`, the easy tier) played by a script: `list_files`, `write_file`
of the gold solution, `run_tests`, `submit` (which scores it with the Scorer). The server runs as its own
process on 127.0.0.1 and `--sessions` clients (openenv-core's MCPToolClient, one WebSocket session each) play
`--episodes` episodes between them; the baseline plays the same episodes on the same number of threads through
`rlvr.integrations.session` in this process, with its own pool of the same size. Reports episodes/s and p50/p99
milliseconds per step (a step is one tool call, round trip; submit includes scoring) for both. With 32 sessions
on a 2-worker pool a step mostly waits for a sandbox worker, so the server's own cost per step is measured
apart: one session, episodes in sequence, p50 (and mean) server step - in-process step (`--overhead-episodes`).

`python benchmarks/bench_serve.py [--sessions 32] [--episodes 64] [--overhead-episodes 8] [--tasks 8] [--json]`
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _plan(spec: str) -> list[tuple[str, dict[str, str]]]:
    """(task key, files to write) for every task of the SPEC: the gold files that differ from the workspace."""
    from rlvr.integrations.session import resolve_tasks
    from rlvr.tasks import registry

    source = registry.make("code")
    out = []
    for task in resolve_tasks(spec):
        gold = source.gold(task)
        assert gold is not None
        out.append((task.key, {p: c for p, c in gold.files.items() if task.workspace.get(p) != c}))
    return out


def _percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50_ms": 1000 * statistics.median(xs), "p99_ms": 1000 * xs[min(len(xs) - 1, int(0.99 * len(xs)))],
            "mean_ms": 1000 * statistics.fmean(xs)}


def in_process(spec: str, plan: list[tuple[str, dict[str, str]]], sessions: int, episodes: int) -> dict:
    from rlvr.integrations.session import Runtime
    from rlvr.sandbox import make_pool

    steps: list[float] = []
    rewards: list[float] = []
    with make_pool() as pool, Runtime.build(spec, pool=pool) as runtime:
        _ = runtime.scorer

        def play(i: int) -> None:
            key, files = plan[i % len(plan)]
            ep = runtime.session()
            ep.start(runtime.task(key), seed=i)
            calls = [("list_files", {}), *(("write_file", {"path": p, "content": c}) for p, c in files.items()),
                     ("run_tests", {}), ("submit", {})]
            for name, args in calls:
                t0 = time.perf_counter()
                _, done = ep.call(name, args)
                if done:
                    rewards.append(ep.finish().reward)
                steps.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(sessions) as ex:
            list(ex.map(play, range(episodes)))
        wall = time.perf_counter() - t0
    return {"episodes_per_s": episodes / wall, **_percentiles(steps), "steps": len(steps),
            "mean_reward": statistics.fmean(rewards)}


async def _server_clients(url: str, plan: list[tuple[str, dict[str, str]]], sessions: int, episodes: int) -> dict:
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    steps: list[float] = []
    rewards: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(episodes):
        queue.put_nowait(i)

    async def session() -> None:
        async with MCPToolClient(base_url=url, message_timeout_s=300) as env:
            while not queue.empty():
                i = queue.get_nowait()
                key, files = plan[i % len(plan)]
                await env.reset(seed=i, task=key)
                calls = [("list_files", {}), *(("write_file", {"path": p, "content": c}) for p, c in files.items()),
                         ("run_tests", {}), ("submit", {})]
                for name, args in calls:
                    t0 = time.perf_counter()
                    result = await env.step(CallToolAction(tool_name=name, arguments=args))
                    steps.append(time.perf_counter() - t0)
                    if result.done:
                        rewards.append(float(result.reward or 0.0))

    t0 = time.perf_counter()
    await asyncio.gather(*(session() for _ in range(sessions)))
    wall = time.perf_counter() - t0
    return {"episodes_per_s": episodes / wall, **_percentiles(steps), "steps": len(steps),
            "mean_reward": statistics.fmean(rewards)}


def over_server(spec: str, plan: list[tuple[str, dict[str, str]]], sessions: int, episodes: int) -> dict:
    from rlvr.integrations.openenv import launched

    with launched(spec, "--max-sessions", str(max(64, sessions))) as (_, url):
        return asyncio.run(_server_clients(url, plan, sessions, episodes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--overhead-episodes", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    spec = f"code:{args.tasks}"
    plan = _plan(spec)
    server = over_server(spec, plan, args.sessions, args.episodes)
    local = in_process(spec, plan, args.sessions, args.episodes)
    one_server = over_server(spec, plan, 1, args.overhead_episodes)
    one_local = in_process(spec, plan, 1, args.overhead_episodes)
    result = {"sessions": args.sessions, "episodes": args.episodes, "server": server, "in_process": local,
              "one_session": {"server": one_server, "in_process": one_local},
              "server_overhead_p50_ms": one_server["p50_ms"] - one_local["p50_ms"],
              "server_overhead_mean_ms": one_server["mean_ms"] - one_local["mean_ms"],
              "throughput_ratio": server["episodes_per_s"] / local["episodes_per_s"]}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, r in ((f"rlvr serve, {args.sessions} sessions", server), (f"in-process, {args.sessions} threads", local),
                    ("rlvr serve, 1 session", one_server), ("in-process, 1 thread", one_local)):
        print(f"{name:34s} {r['episodes_per_s']:6.2f} episodes/s  step p50 {r['p50_ms']:7.1f} ms  "
              f"p99 {r['p99_ms']:7.1f} ms  mean {r['mean_ms']:7.1f} ms  ({r['steps']} steps, mean reward {r['mean_reward']:.2f})")
    print(f"server overhead per step, one session: p50 {result['server_overhead_p50_ms']:.1f} ms, "
          f"mean {result['server_overhead_mean_ms']:.1f} ms; "
          f"throughput server / in-process: {result['throughput_ratio']:.2f}")


if __name__ == "__main__":
    main()
