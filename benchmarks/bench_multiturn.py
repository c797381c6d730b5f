"""Generation speed of the `hf` backend along a long tool episode: turn 1 against turn 30, with the KV cache
of the previous turn reused (kvcache.PrefixCache) and without it (`kv_reuse_tokens = 0`: every turn prefills
the whole conversation), in the same run on the same prompts.

The episode: `--rows` rows (a group's samples of one task: the same system and user prompt, their own seeds),
`--turns` turns. Each turn every row generates exactly `--new-tokens` tokens (temperature 1, no end token),
then the record is extended as the rollout engine's TokenStream extends it: the sampled tokens, the chat
template's end of turn, a tool message of `--tool-tokens` tokens of a log and the next generation prompt.
The reusing policy runs every turn; the fresh one (stateless) runs the same prompts at the turns measured
(`--at`, default 1,10,20,30). tokens/s = generated tokens over the wall seconds of the generate call.

The model: `--model`, else `$RLVR_REAL_MODEL`, else `.rlvr-cache/smollm2-135m-instruct`
(SmolLM2-135M-Instruct, its own chat template, 8k window); `builtin:tiny` when that is absent. One torch
thread. Run: `.venv/bin/python benchmarks/bench_multiturn.py [--turns 30] [--rows 2] [--json PATH]`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_MODEL = ROOT / ".rlvr-cache" / "smollm2-135m-instruct"
LOG = "".join(f"step {i}: compiled module_{i % 17}.py in {i * 37 % 101} ms, 0 warnings\n"
              for i in range(4000))


def find_model(arg: str | None) -> str:
    path = Path(arg or os.environ.get("RLVR_REAL_MODEL") or DEFAULT_MODEL)
    if (path / "config.json").is_file():
        return str(path)
    print(f"real model not found at {path} (`make real-model` builds it): measuring builtin:tiny",
          file=sys.stderr)
    return "builtin:tiny"


def tool_tail(policy, turn: int, tokens: int) -> list[int]:
    """The template's text after an assistant turn: its end, a tool message of about `tokens` tokens, and the
    next generation prompt, as the tokenizer's own template renders them."""
    from rlvr.envs.messages import Message

    ids = policy.encode(LOG[turn * 997 % 20000:])[:tokens]
    msgs = [Message(role="user", content="u"), Message(role="assistant", content="a"),
            Message(role="tool", content=policy.decode(ids), tool_call_id=f"c{turn}")]
    base = policy.render(msgs[:2], add_generation_prompt=False)
    full = policy.render(msgs)
    return policy.encode(full[len(base) - len(_end(policy)):])


def _end(policy) -> str:
    """The text the template puts right after an assistant message's content (its end of turn)."""
    from rlvr.envs.messages import Message

    text = policy.render([Message(role="user", content="u"), Message(role="assistant", content="a")],
                         add_generation_prompt=False)
    return text[text.rindex("a") + 1:]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--tool-tokens", type=int, default=160)
    ap.add_argument("--at", default="1,10,20,30")
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    import torch

    from rlvr.envs.messages import Message
    from rlvr.rollout.policies.hf import HFPolicy
    from rlvr.rollout.policy import SamplingParams

    torch.set_num_threads(1)
    model = find_model(args.model)
    reuse = HFPolicy(model, device="cpu", threads=1)
    fresh = HFPolicy(model, device="cpu", threads=1, kv_reuse_tokens=0)
    for p in (reuse, fresh):
        p.eos_ids = frozenset({-1})  # every row generates exactly --new-tokens tokens
    at = {int(x) for x in args.at.split(",")}
    conv = [Message(role="system",
                    content="You are a build engineer. Read the logs with the tools, then report."),
            Message(role="user", content="Find which module is slowest to compile.")]
    rows = [conv] * args.rows
    prompts = [reuse.encode(reuse.render(conv))] * args.rows
    out: list[dict] = []
    print(f"model {Path(model).name}, {args.rows} rows x {args.new_tokens} new tokens per turn, "
          f"tool outputs of {args.tool_tokens} tokens", flush=True)
    print(f"{'turn':>4} {'context':>8} {'reuse tok/s':>12} {'fresh tok/s':>12} {'speed-up':>9} "
          f"{'prefilled (reuse)':>18}", flush=True)
    for turn in range(1, args.turns + 1):
        if len(prompts[0]) + args.new_tokens > reuse.max_context:
            print(f"turn {turn}: the context ({len(prompts[0])} tokens) is full", flush=True)
            break
        params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens,
                                seeds=tuple(1000 * turn + i for i in range(args.rows)))
        before = reuse.kv_reuse.prefilled_tokens
        t0 = time.perf_counter()
        got = reuse.generate(rows, params, prompt_token_ids=prompts)
        dt = time.perf_counter() - t0
        gen = sum(len(c.token_ids) for c in got)
        row = {"turn": turn, "context": len(prompts[0]), "reuse_tok_s": gen / dt, "reuse_s": dt,
               "prefilled": reuse.kv_reuse.prefilled_tokens - before}
        if turn in at:
            t0 = time.perf_counter()
            ref = fresh.generate(rows, params, prompt_token_ids=prompts)
            fdt = time.perf_counter() - t0
            row.update(fresh_tok_s=gen / fdt, fresh_s=fdt,
                       same_tokens=[c.token_ids for c in got] == [c.token_ids for c in ref],
                       max_lp_diff=max(abs(x - y) for a, b in zip(got, ref) for x,
                                       y in zip(a.logprobs, b.logprobs)))
            print(f"{turn:>4} {row['context']:>8} {row['reuse_tok_s']:>12.1f} {row['fresh_tok_s']:>12.1f} "
                  f"{fdt / dt:>8.2f}x {row['prefilled']:>18}  same tokens: {row['same_tokens']}, "
                  f"max |Δ log-prob| {row['max_lp_diff']:.1e}", flush=True)
        out.append(row)
        prompts = [p + c.token_ids + tool_tail(reuse, turn * 7 + i, args.tool_tokens)
                   for i, (p, c) in enumerate(zip(prompts, got))]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    measured = [r for r in out if "fresh_tok_s" in r]
    if len(measured) >= 2:
        first, last = measured[0], measured[-1]
        print(f"turn {last['turn']} against turn {first['turn']}: reuse "
              f"{last['reuse_tok_s'] / first['reuse_tok_s']:.2f}x of its turn-{first['turn']} speed, fresh "
              f"prefill {last['fresh_tok_s'] / first['fresh_tok_s']:.2f}x; stored {reuse.kv_reuse.tokens} "
              f"tokens; peak RSS {rss:.2f} GB", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": platform.platform(),
                                               "date": time.strftime("%Y-%m-%d"),
                                               "model": model, "args": vars(args), "turns": out,
                                               "peak_rss_gb": rss}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
