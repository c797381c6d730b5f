"""The gateway (`rlvr.rollout.gateway.core`) against the in-process policy, and agents in sandboxes through
it.

Overhead: the same calls (one user message, `--tokens` new tokens, greedy) on the tiny hf model, once through
`policy.generate` in this process and once through the gateway over loopback HTTP with each API's official
SDK: chat completions and Responses with the openai SDK, Messages with the anthropic SDK, each plain and
streamed (every event read); reports p50 milliseconds of each and of their difference, per API (goal:
gateway overhead <= 5 ms p50). Throughput: `--agents` concurrent agents (the openai SDK in a small two-call
loop, each in its episode's isolated sandbox, its workspace judged) over `--episodes` episodes: episodes/s.

`python benchmarks/bench_gateway.py [--calls 50] [--tokens 4] [--agents 32] [--episodes 64] [--json]`
(`--episodes 0` skips the agents)
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

AGENT = """
import os, openai
c = openai.OpenAI(max_retries=0)
m = [{"role": "user", "content": open(os.environ["RLVR_PROMPT_FILE"]).read()}]
for _ in range(2):
    r = c.chat.completions.create(model="p", messages=m, max_tokens=4)
    m += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "go on"}]
open("sol.py", "w").write("return a + b\\n")
"""


API_CALLS = ("chat", "chat-stream", "messages", "messages-stream", "responses", "responses-stream")
"""The calls measured: each API, plain and streamed."""


def _caller(api: str, base_url: str, key: str):
    """One call of `api` through its official SDK, streamed ones read to their last event."""
    import anthropic
    import openai

    oa = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    an = anthropic.Anthropic(base_url=base_url[:-3], api_key=key, max_retries=0)
    msgs = [{"role": "user", "content": "Say hi."}]
    kind, _, stream = api.partition("-")
    if kind == "chat":
        return lambda: list(oa.chat.completions.create(model="p", messages=msgs, stream=True)) if stream \
            else oa.chat.completions.create(model="p", messages=msgs)
    if kind == "messages":
        return lambda: list(an.messages.create(model="p", max_tokens=64, messages=msgs,
                                               stream=True)) if stream \
            else an.messages.create(model="p", max_tokens=64, messages=msgs)
    return lambda: list(oa.responses.create(model="p", input="Say hi.", stream=True)) if stream \
        else oa.responses.create(model="p", input="Say hi.")


def overhead(policy, calls: int, tokens: int) -> dict[str, dict[str, float]]:
    """Per API: p50 ms in process, through the gateway, and of their difference (calls alternate, so both see
    the same machine load; the first 3 of each warm up)."""
    from rlvr.envs.messages import Message
    from rlvr.rollout.gateway.core import Gateway
    from rlvr.rollout.gateway.server import serve
    from rlvr.rollout.policy import SamplingParams

    sp = SamplingParams(temperature=0.0, max_new_tokens=tokens)
    conv = [Message(role="user", content="Say hi.")]
    gw = Gateway(policy, sp, batch_window_s=0.0)
    out = {}
    with serve(gw) as server:
        for api in API_CALLS:
            key = gw.open_session("bench-" + api).key
            call = _caller(api, server.base_url, key)
            local, remote, cpu = [], [], []
            for i in range(calls + 3):
                t0, c0 = time.perf_counter(), time.process_time()
                policy.generate([conv], sp, prompt_token_ids=[policy.encode(policy.render(conv))])
                t1, c1 = time.perf_counter(), time.process_time()
                gw.sessions[key].stream = None  # each call a fresh one-message history, like the local call
                call()
                t2, c2 = time.perf_counter(), time.process_time()
                if i >= 3:
                    local.append((t1 - t0) * 1e3)
                    remote.append((t2 - t1) * 1e3)
                    cpu.append(((c2 - c1) - (c1 - c0)) * 1e3)
            # CPU time of this process (client SDK, server and model, all threads): what the gateway adds,
            # without the waits that other processes' load puts into wall time
            out[api] = {"in_process_p50_ms": statistics.median(local),
                        "gateway_p50_ms": statistics.median(remote),
                        "overhead_p50_ms": statistics.median(r - lo for r, lo in zip(remote, local)),
                        "overhead_cpu_p50_ms": statistics.median(cpu)}
    gw.close()
    return out


def throughput(policy, agents: int, episodes: int) -> dict[str, float]:
    from rlvr.config import AgentConfig
    from rlvr.rollout.gateway.agents import AgentRollouts
    from rlvr.rollout.gateway.core import Gateway
    from rlvr.rollout.policy import SamplingParams
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.sandbox.result import ExecLimits
    from rlvr.tasks.spec import Task, TaskLimits
    from rlvr.verify.scorer import Scorer

    agent_dir = Path(tempfile.mkdtemp(prefix="rlvr-bench-agent-"))
    (agent_dir / "agent.py").write_text(AGENT)
    tasks = [Task(id=f"t{i}", domain="math", prompt="Add a and b.", workspace={"sol.py": "pass\n"},
                  answer="0", limits=TaskLimits(max_turns=4, max_tokens=64, wall_s=120))
             for i in range(max(1, episodes // 2))]
    gw = Gateway(policy, SamplingParams(max_new_tokens=4))
    with BwrapPool(ExecLimits(), workers=agents, warm=(), spares=0) as pool:
        runner = AgentRollouts(gw, pool, Scorer(pool), AgentConfig(command="python $RLVR_AGENT_DIR/agent.py",
                                                                  dir=str(agent_dir), concurrency=agents))
        t0 = time.perf_counter()
        eps = runner.run(tasks, 2)
        wall = time.perf_counter() - t0
    gw.close()
    ok = sum(e.status != "infra_error" and e.num_turns == 2 for e in eps)
    return {"agents": agents, "episodes": len(eps), "complete_episodes": ok, "wall_s": wall,
            "episodes_per_s": len(eps) / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--agents", type=int, default=32)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.rollout.policies.hf import HFPolicy

    torch.set_num_threads(1)
    tiny = build_tiny_model(Path(tempfile.mkdtemp(prefix="rlvr-bench-tiny-")), n_layer=2, n_embd=64, n_head=4,
                            n_positions=1024, seed=3)
    policy = HFPolicy(tiny, device="cpu", threads=1)
    out = {"overhead": overhead(policy, args.calls, args.tokens)}
    if args.episodes:
        out["agents"] = throughput(policy, args.agents, args.episodes)
    if args.json:
        print(json.dumps(out))
        return
    for api, o in out["overhead"].items():
        print(f"{api:17s} gateway overhead per call: p50 {o['overhead_p50_ms']:.2f} ms, CPU "
              f"{o['overhead_cpu_p50_ms']:.2f} ms (in-process "
              f"{o['in_process_p50_ms']:.2f} ms, through the gateway {o['gateway_p50_ms']:.2f} ms; "
              "goal <= 5 ms)")
    if "agents" in out:
        a = out["agents"]
        print(f"{a['agents']} concurrent agents: {a['episodes']} episodes ({a['complete_episodes']} "
              f"complete) in {a['wall_s']:.1f} s = {a['episodes_per_s']:.2f} episodes/s")


if __name__ == "__main__":
    main()
