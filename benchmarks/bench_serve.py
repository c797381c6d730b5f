"""The OpenEnv server (`rlvr serve`) against the in-process Env, in one run, on the same work.

Each episode is a multi-turn code task (`code`, the easy tier) played by a script: `list_files`, `write_file`
of the gold solution, `run_tests`, `submit` (which scores it with the Scorer). The server runs as its own
process on 127.0.0.1 and `--sessions` clients (openenv-core's MCPToolClient, one WebSocket session each) play
`--episodes` episodes between them; the baseline plays the same episodes on the same number of threads through
`rlvr.integrations.session` in this process, with its own pool of the same size. Reports episodes/s and
p50/p99 milliseconds per step (a step is one tool call, round trip; submit includes scoring) for both. With 32
sessions on a 2-worker pool a step mostly waits for a sandbox worker, so the server's own cost per step is
measured apart, on a step whose work costs next to nothing (`list_files` reads the host's copy of the
workspace): one session, `--overhead-steps` calls through the server and as many in-process, in alternating
blocks; overhead = server p50 - in-process p50. A sandboxed step (`run_tests`) costs milliseconds of its own
and varies with the machine's load by more than the server adds, so it is reported beside it, not subtracted.

`python benchmarks/bench_serve.py [--sessions 32] [--episodes 64] [--overhead-steps 400] [--tasks 8] [--json]`
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
    """(task key, files to write) for every task of the SPEC: the gold files that differ from the
    workspace."""
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
    return {"p50_ms": 1000 * statistics.median(xs),
            "p99_ms": 1000 * xs[min(len(xs) - 1, int(0.99 * len(xs)))],
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
            calls = [("list_files", {}),
                     *(("write_file", {"path": p, "content": c}) for p, c in files.items()),
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


async def _server_clients(url: str, plan: list[tuple[str, dict[str, str]]], sessions: int,
                          episodes: int) -> dict:
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
                calls = [("list_files", {}),
                         *(("write_file", {"path": p, "content": c}) for p, c in files.items()),
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


EPISODE = (*(("list_files", {}),) * 6, ("run_tests", {}))
"""The steps of one overhead episode: within every task's turn budget, so no step is the refusal of an ended
one."""


def overhead(spec: str, steps: int) -> dict:
    """Seconds per `list_files` step (and per `run_tests` step) through one server session and one in-process
    session, in alternating episodes (`EPISODE`) so that both see the same load."""
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    from rlvr.integrations.openenv import launched
    from rlvr.integrations.session import Runtime
    from rlvr.sandbox import make_pool

    times: dict[str,
                dict[str, list[float]]] = {w: {"list_files": [], "run_tests": []}
                                           for w in ("server", "local")}

    def timed(where: str, tool: str, t0: float, text: str) -> None:
        if text.startswith("error"):
            raise RuntimeError(f"{where} {tool}: {text[:200]}")
        times[where][tool].append(time.perf_counter() - t0)

    async def run(url: str) -> None:
        async with MCPToolClient(base_url=url, message_timeout_s=300) as env:
            with make_pool() as pool, Runtime.build(spec, pool=pool) as runtime:
                ep = runtime.session()
                for i in range(max(1, steps // 6)):
                    await env.reset(seed=i, task=0)
                    for tool, args in EPISODE:
                        t0 = time.perf_counter()
                        got = await env.step(CallToolAction(tool_name=tool, arguments=args))
                        obs = got.observation
                        timed("server", tool, t0, f"error: {obs.error}" if obs.error else str(obs.result))
                    ep.start(runtime.task(0), seed=i)
                    for tool, args in EPISODE:
                        t0 = time.perf_counter()
                        timed("local", tool, t0, ep.call(tool, args)[0])
                ep.close()

    with launched(spec) as (_, url):
        asyncio.run(run(url))
    out: dict = {w: {tool: _percentiles(xs) for tool, xs in by.items()} for w, by in times.items()}
    out["overhead_p50_ms"] = out["server"]["list_files"]["p50_ms"] - out["local"]["list_files"]["p50_ms"]
    out["overhead_mean_ms"] = out["server"]["list_files"]["mean_ms"] - out["local"]["list_files"]["mean_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--overhead-steps", type=int, default=400)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    spec = f"code:{args.tasks}"
    plan = _plan(spec)
    server = over_server(spec, plan, args.sessions, args.episodes)
    local = in_process(spec, plan, args.sessions, args.episodes)
    cost = overhead(spec, args.overhead_steps)
    result = {"sessions": args.sessions, "episodes": args.episodes, "server": server, "in_process": local,
              "one_session": cost, "server_overhead_p50_ms": cost["overhead_p50_ms"],
              "server_overhead_mean_ms": cost["overhead_mean_ms"],
              "throughput_ratio": server["episodes_per_s"] / local["episodes_per_s"]}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, r in ((f"rlvr serve, {args.sessions} sessions", server),
                    (f"in-process, {args.sessions} threads", local)):
        print(f"{name:34s} {r['episodes_per_s']:6.2f} episodes/s  step p50 {r['p50_ms']:7.1f} ms  "
              f"p99 {r['p99_ms']:7.1f} ms  mean {r['mean_ms']:7.1f} ms  ({r['steps']} steps, mean reward "
              f"{r['mean_reward']:.2f})")
    for where in ("server", "local"):
        for tool, r in cost[where].items():
            print(f"one session, {where:6s} {tool:10s} p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  "
                  f"mean {r['mean_ms']:7.2f} ms")
    print(f"server overhead per step, one session: p50 {result['server_overhead_p50_ms']:.2f} ms, "
          f"mean {result['server_overhead_mean_ms']:.2f} ms; "
          f"throughput server / in-process: {result['throughput_ratio']:.2f}")

if __name__ == "__main__":
    main()
