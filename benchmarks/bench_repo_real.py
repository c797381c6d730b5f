"""The repo-real pack: how long it took to build, what one verification costs beside the project's own test
command on the same files, how many candidates each generator kept, pass@1 of the scripted gold policy (must
be 100 %) through `rlvr eval` (the env, its tools and the verifier, as a model's episode goes), of a weak
baseline through `rlvr eval` likewise, and of the untouched broken tree (the floor).

The weak baseline is the real instruct model of the tests (SmolLM2-135M-Instruct, `make real-model`), 4 turns
of at most 192 tokens at temperature 0.7: the builtin tiny model's 512-token window cannot hold a repo task's
first prompt, so its every episode ends before its first turn (truncated by context), which measures nothing.

Needs the built pack (`make repo-real`).
`python benchmarks/bench_repo_real.py [--sample N] [--gold M] [--weak W] [--weak-policy SPEC]`: N tasks timed
(default 6), M tasks for the gold policy (default 0 = every task), W for the weak baseline (default 20).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def own_command_s(task, test_files: list[str]) -> float:
    """The project's own test command (plain pytest in a subprocess, no sandbox) on the gold files (a src
    layout's import roots on PYTHONPATH, as the project's own configuration would put them)."""
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp:
        for rel, text in {**task.workspace, **(task.solution or {})}.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *test_files], cwd=tmp,
                       capture_output=True, check=False,
                       env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                            "PYTHONPATH": ":".join(str(Path(tmp) / r)
                                                   for r in task.verifier.get("import_roots", []))})
        return time.perf_counter() - t0


def gold_script(tasks) -> dict:
    """A `scripted:` policy file that writes each task's solution files with `write_file` and submits. Tasks
    are matched by their prompt; tasks with the same prompt get the union of their solutions (each is the
    original file, so writing them all restores every one of those tasks)."""
    by_prompt: dict[str, dict[str, str]] = {}
    for task in tasks:
        by_prompt.setdefault(task.prompt, {}).update(task.solution or {})
    return {"match": [{"prompt_contains": prompt, "turns": [
        {"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": p, "content": t}}
                                       for p, t in sorted(files.items())]},
        {"content": "", "tool_calls": [{"name": "submit", "arguments": {}}]}]}
        for prompt, files in by_prompt.items()]}


def rlvr_eval(policy: str, n: int, *extra: str) -> tuple[dict, float]:
    """`rlvr eval --json` on `repo-real:n` (0: every task): (its report, wall seconds)."""
    spec = "repo-real" if n == 0 else f"repo-real:{n}"
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-eval-") as out:
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "rlvr", "eval", "--policy", policy, "--tasks", spec, "-k",
                              "1",
                              "--json", "--output-dir", out, *extra], capture_output=True, text=True,
                              check=False)
        wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"rlvr eval --policy {policy} failed: {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout), wall


def _pass1(report: dict) -> tuple[float, int, list]:
    d = report["domains"]["repo-real"]
    return d["pass@1"], d["n"], d.get("pass@1_ci", [])


WEAK_POLICY = "hf:.rlvr-cache/smollm2-135m-instruct"
WEAK_OPTIONS = ("--max-turns", "4", "--max-new-tokens", "192", "--temperature", "0.7")


def main(n: int, gold_n: int, weak_n: int, weak_policy: str = WEAK_POLICY) -> None:
    from rlvr.domains.repo.real import STAMP
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.tasks import registry
    from rlvr.tasks.spec import FinalState
    from rlvr.verify import VerifyContext, verify

    src = registry.make("repo-real")
    if not src.size:
        sys.exit("the repo-real pack is not built: run `make repo-real` first")
    stamp = json.loads((src.path / STAMP).read_text())
    report = stamp["report"]
    print(f"pack: {src.size} tasks from {len(report['projects'])} projects, built in "
          f"{report['seconds']:.0f} s")
    tried: dict[str, int] = {}
    kept: dict[str, int] = {}
    for p in report["projects"]:
        print(f"  {p['name']} {p['version']}: tests {p['tests_found']} found / {p['tests_kept']} kept, "
              f"{p['seconds']:.0f} s, {sum(p['kept'].values())} tasks" + (f", skipped: {p['skipped']}"
                                                                          if p['skipped'] else ""))
        for g, c in p["tried"].items():
            tried[g] = tried.get(g, 0) + c
        for g, c in p["kept"].items():
            kept[g] = kept.get(g, 0) + c
    for g, count in tried.items():
        print(f"  generator {g}: {kept.get(g, 0)}/{count} candidates kept ({kept.get(g, 0) / count:.0%})")

    by_project: dict[str, list[int]] = {}
    for i in range(src.size):
        by_project.setdefault(src.id_at(i).split("-")[0], []).append(i)
    sample = [idx[(j * 7919) % len(idx)] for j in range(n)
              for idx in by_project.values()][:n * len(by_project)]
    sample = sorted(set(sample))[: max(n, 1)]
    verify_s, own_s, gold_ok, floor_ok = [], [], 0, 0
    with BwrapPool(workers=1, spares=0) as pool:
        ctx = VerifyContext(pool=pool)
        for i in sample:
            task = src.get(i)
            test_files = [t.removeprefix("hidden_tests/") for t in task.verifier["tests"]]
            t0 = time.perf_counter()
            gold = verify(task, FinalState(files={**task.workspace, **(task.solution or {})}), ctx)
            verify_s.append(time.perf_counter() - t0)
            own_s.append(own_command_s(task, test_files))
            gold_ok += gold.passed and gold.score == 1.0
            floor = verify(task, FinalState(files=dict(task.workspace)), ctx)
            floor_ok += floor.passed
    v50, o50 = statistics.median(verify_s), statistics.median(own_s)
    print(f"verification of one task: p50 {v50:.2f} s; the project's own test command on the same files: "
          f"p50 {o50:.2f} s; ratio {v50 / o50:.1f}x ({len(sample)} tasks)")
    print(f"gold solution (the final state the scripted gold policy submits) pass@1: {gold_ok}/{len(sample)} "
          f"({gold_ok / len(sample):.0%})")
    print(f"untouched-workspace baseline pass@1: {floor_ok}/{len(sample)} ({floor_ok / len(sample):.0%})")
    if gold_ok != len(sample):
        sys.exit("gold pass@1 is below 100 %")

    tasks = [src.get(i) for i in range(src.size)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(gold_script(tasks), f)
    try:
        report, wall = rlvr_eval(f"scripted:{f.name}", gold_n)
    finally:
        os.unlink(f.name)
    gold_p1, gold_judged, _ = _pass1(report)
    print(f"scripted gold policy through rlvr eval: pass@1 {gold_p1:.1%} on {gold_judged} tasks "
          f"({wall:.0f} s)")
    if weak_n:
        report, wall = rlvr_eval(weak_policy, weak_n, *WEAK_OPTIONS)
        p1, judged, ci = _pass1(report)
        print(f"weak baseline, {weak_policy} ({' '.join(WEAK_OPTIONS)}) through rlvr eval: pass@1 {p1:.1%} "
              f"{ci} on {judged} tasks ({wall:.0f} s)")
    if gold_n == 0 and gold_judged != src.size:
        print(f"note: {src.size - gold_judged} tasks were not judged by the gold run (infra faults)")
    if gold_p1 != 1.0:
        sys.exit("the scripted gold policy's pass@1 is below 100 %")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=6)
    ap.add_argument("--gold", type=int, default=0)
    ap.add_argument("--weak", type=int, default=20)
    ap.add_argument("--weak-policy", default=WEAK_POLICY)
    a = ap.parse_args()
    main(a.sample, a.gold, a.weak, a.weak_policy)
