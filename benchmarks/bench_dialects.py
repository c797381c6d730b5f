"""Tool-call parse rate by model family: generated assistant turns rendered by each family's published chat
template (tests/assets/chat_templates), read back by the family's dialect (`rlvr.envs.dialects`) and, as the
baseline, by the single-format parser rlvr had before dialects (`rlvr.envs.parse.parse_text`,
`<tool_call>{json}</tool_call>`).

A turn counts as parsed when exactly its calls come back (names and arguments, in order) and no error. Each
turn is drawn by index (`Random(seed + i)`): some text, one to three calls (one where the family's template
renders one a turn) of the built-in tools, with arguments that stress a format: code with quotes, backslashes,
braces, markup and a final newline, commands with pipes, non-ASCII paths. Each is read in two forms: as the
template renders it (the form the model was trained on), and as the dialect writes it (`format_turn`: several
calls a turn in every family, harmony's own header order, Llama's `;`-separated calls). Reports the parse rate
of each (a ratio of turns) and the microseconds a parse of the template form takes.

`python benchmarks/bench_dialects.py [--turns 300] [--seed 0] [--json]`
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.families: the templates and tokenizers

CODE = ['def f(x):\n    return "a\\\\b" if x else {\'k\': [1, 2]}\n', "print('<b>&amp;</b>')\n",
        'x = "{\\"n\\": 1}"\nassert x\n', "# ünïcode – ok\nvalue = 3\n", "    indented = True\n"]
COMMANDS = ["ls -la", "python -m pytest -q tests/test_sol.py", "grep -rn 'def ' src | head -5",
            'echo "{x}" > out']
PATHS = ["sol.py", "src/pkg/mod.py", "données/ü.py", "a b/c.txt"]
TEXTS = ["", "Let me look at the workspace first.", "The tests fail. I'll write the fix.", "Done."]


def draw(rng: random.Random, single: bool) -> tuple[str, list[Any]]:
    """(text, calls) of one turn."""
    from rlvr.envs.messages import ToolCall

    calls = []
    for _ in range(1 if single else rng.randint(1, 3)):
        kind = rng.choice(["run", "write_file", "read_file", "submit"])
        args = {"run": lambda: {"command": rng.choice(COMMANDS)},
                "write_file": lambda: {"path": rng.choice(PATHS), "content": rng.choice(CODE)},
                "read_file": lambda: {"path": rng.choice(PATHS)},
                "submit": dict}[kind]()
        calls.append(ToolCall(id=f"call_{len(calls)}", name=kind, arguments=args))
    return rng.choice(TEXTS), calls


def rendered_turn(tok: Any, family: str, dialect: Any, text: str, calls: list[Any]) -> str:
    """The turn as the family's template renders it after a user message, as the model would have written
    it."""
    from tests.families import turn_text

    user = [{"role": "user", "content": "Fix sol.py."}]
    prompt = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(user + [dialect.structured(text, calls)], tokenize=False)
    return turn_text(tok, family, dialect.markers, prompt, full)


def measure(family: str, turns: int, seed: int) -> dict[str, float]:
    from tests.families import FAMILIES, family_tokenizer

    from rlvr.envs.dialects import DIALECTS
    from rlvr.envs.parse import parse_text

    tok = family_tokenizer(family)
    dialect = DIALECTS[FAMILIES[family]["dialect"]]
    props = {k: {"type": "string"} for k in ("command", "path", "content")}
    params = {"type": "object", "properties": props}
    tools = [{"type": "function", "function": {"name": n, "parameters": params}}
             for n in ("run", "write_file", "read_file")]
    ok = base_ok = written_ok = written_base_ok = 0
    t_dialect: list[float] = []
    t_base: list[float] = []
    dialect.parse("warm up", tools)  # the library's import is paid once per process, not per turn

    def right(got: tuple[list[Any], list[str]], want: list[tuple[str, Any]]) -> bool:
        return [(c.name, c.arguments) for c in got[0]] == want and not got[1]

    for i in range(turns):
        text, calls = draw(random.Random(seed + i), dialect.single_call)
        turn = rendered_turn(tok, family, dialect, text, calls)
        want = [(c.name, c.arguments) for c in calls]
        t0 = time.perf_counter()
        parsed = dialect.parse(turn, tools)
        t1 = time.perf_counter()
        base = parse_text(turn)
        t2 = time.perf_counter()
        t_dialect.append(t1 - t0)
        t_base.append(t2 - t1)
        ok += right((parsed.calls, parsed.errors), want)
        base_ok += right(base, want)
        text, calls = draw(random.Random(seed + i), False)
        written = dialect.format_turn(calls, text)
        again = dialect.parse(written, tools)
        want = [(c.name, c.arguments) for c in calls]
        written_ok += right((again.calls, again.errors), want)
        written_base_ok += right(parse_text(written), want)
    return {"dialect": dialect.name, "turns": turns, "parse_rate": ok / turns,
            "baseline_parse_rate": base_ok / turns, "written_parse_rate": written_ok / turns,
            "written_baseline_parse_rate": written_base_ok / turns,
            "parse_us_p50": statistics.median(t_dialect) * 1e6,
            "baseline_us_p50": statistics.median(t_base) * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from tests.families import FAMILIES

    rows = {f: measure(f, args.turns, args.seed) for f in FAMILIES if f != "kimi-k2-instruct"}
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'family':18s} {'dialect':12s} {'template form':>13s} {'baseline':>9s} {'written form':>12s} "
          f"{'baseline':>9s} {'parse us':>9s} {'base us':>8s}")
    for f, r in rows.items():
        print(f"{f:18s} {r['dialect']:12s} {r['parse_rate']:13.3f} {r['baseline_parse_rate']:9.3f} "
              f"{r['written_parse_rate']:12.3f} {r['written_baseline_parse_rate']:9.3f} "
              f"{r['parse_us_p50']:9.1f} "
              f"{r['baseline_us_p50']:8.1f}")
    total = sum(r["turns"] for r in rows.values())

    def mean(key: str) -> float:
        return sum(r[key] * r["turns"] for r in rows.values()) / total

    print(f"all families ({total} turns a form): template form {mean('parse_rate'):.3f} against a baseline "
          f"of "
          f"{mean('baseline_parse_rate'):.3f}; written form {mean('written_parse_rate'):.3f} against "
          f"{mean('written_baseline_parse_rate'):.3f}")


if __name__ == "__main__":
    main()
