"""Task images, each figure beside a baseline measured in the same run:

1. **job start in an image**: `/bin/true` through the warm pool in an image (the base image, no Python: the
   supervisor is the host's interpreter and the job is exec'd) against the same job on the host root, and
   `python -c pass` in an image with Python (forked from the image's warm interpreter) against the host
   root's; p50 and p99 over `--jobs` jobs each. Goal: p50 in an image at most 2x the host root's.
2. **against a container start**: `podman run --rm IMAGE /bin/true` (p50 of `--podman` runs) against the same
   job in the pool. Goal: the pool at least 20x faster.
3. **build and unpack, cold and cached**: a Dockerfile with a fresh step (podman builds one layer, rlvr
   unpacks the root), then the same reference again (found by its fingerprint: no podman call); the unpack
   alone is reported too. Goal: the cached resolve adds nothing measurable to a run's start, which is measured
   as the start of a warm pool in the cached image against a pool on the host root (both to their first job's
   result).
4. **a Harbor episode**: one multi-turn Harbor task (its image FROM the base, tests/test.sh writing the
   reward) played by a scripted policy through the env loop (terminal calls, a visible test run, submit), then
   verified as Harbor tasks are (a fresh lease with /tests mounted and a fresh /logs), against the same task,
   the same script and the same verification on the host root; p50 of `--episodes` episodes each.

Needs the base image (`make images`). Prints a table, or one JSON object with `--json`.
Run: `.venv/bin/python benchmarks/bench_images.py [--jobs 300] [--podman 15]`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BASE = "debian:bookworm-slim"
PYTHON_IMAGE = f"dockerfile:{ROOT / 'tests/sandbox/images/python'}"


def _pcts(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    xs = sorted(samples)
    return statistics.median(xs) * 1000, xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1000


def _time(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def job_start(jobs: int) -> dict[str, float]:
    """p50/p99 of a trivial job on the host root and in images, through one warm pool."""
    from rlvr.sandbox.pool import BwrapPool

    fig: dict[str, float] = {}
    with BwrapPool(workers=1, spares=0) as pool:
        cases = {"host_true": (["/bin/true"], None), "image_true": (["/bin/true"], BASE),
                 "host_python": (["python", "-c", "pass"], None), "image_python": (["python", "-c", "pass"],
                                                                                    PYTHON_IMAGE)}
        for argv, image in cases.values():  # warm every template and image pool first
            for _ in range(10):
                assert pool.run(argv, image=image).ok
        for name, (argv, image) in cases.items():
            samples = _time(lambda argv=argv, image=image: pool.run(argv, image=image), jobs)
            fig[f"{name}_p50_ms"], fig[f"{name}_p99_ms"] = _pcts(samples)
    fig["image_vs_host_true_p50"] = fig["image_true_p50_ms"] / fig["host_true_p50_ms"]
    fig["image_vs_host_python_p50"] = fig["image_python_p50_ms"] / fig["host_python_p50_ms"]
    return fig


def podman_start(runs: int, pool_p50_ms: float) -> dict[str, float]:
    """p50 of `podman run --rm` of the same job in the same image, with podman's default network and without
    one (`--network none`, the closer match to a job without network and the faster of the two)."""
    from rlvr.sandbox import podman

    env = podman.environment()
    fig = {}
    for name, extra in (("podman_run", []), ("podman_run_nonet", ["--network", "none"])):
        argv = [podman.binary(), "run", "--rm", *extra, BASE, "/bin/true"]
        subprocess.run(argv, env=env, check=True, capture_output=True)  # warm podman's own caches
        samples = _time(lambda argv=argv: subprocess.run(argv, env=env, check=True, capture_output=True),
                        runs)
        fig[f"{name}_p50_ms"], _ = _pcts(samples)
        fig[f"{name}_vs_pool_p50"] = fig[f"{name}_p50_ms"] / pool_p50_ms
    return fig


def build_and_unpack() -> dict[str, float]:
    """Cold build + unpack of a one-step Dockerfile on the base image, then the cached resolve."""
    from rlvr.sandbox import imagecache, podman

    with tempfile.TemporaryDirectory(prefix="rlvr-bench-img-") as tmp:
        ctx = Path(tmp) / "ctx"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo {os.urandom(8).hex()} > /nonce\n")
        cache = imagecache.Cache(Path(tmp) / "cache")
        t0 = time.perf_counter()
        root = imagecache.resolve(f"dockerfile:{ctx}", cache)
        cold = time.perf_counter() - t0
        cached = _time(lambda: imagecache.resolve(f"dockerfile:{ctx}", cache), 20)
        t0 = time.perf_counter()
        imagecache.resolve(BASE, cache)  # a store reference: asks podman for the ID, then unpacks
        store_cold = time.perf_counter() - t0
        store_cached = _time(lambda: imagecache.resolve(BASE, cache), 5)
        podman.run(["rmi", root.id], check=False)  # the one-off build: its layers on the base go too
    return {"build_unpack_cold_s": cold, "unpack_s": root.unpack_s, "build_s": cold - root.unpack_s,
            "resolve_cached_ms": statistics.median(cached) * 1000, "store_ref_cold_s": store_cold,
            "store_ref_cached_ms": statistics.median(store_cached) * 1000}


def run_start(repeats: int) -> dict[str, float]:
    """A pool's start to its first job's result: on the host root, and in the cached base image (the image
    resolved from the cache included). Neither pool warms pytest, which the host pool does by default and an
    image without Python cannot: the comparison is of the roots alone."""
    from rlvr.sandbox import imagecache
    from rlvr.sandbox.environments import Environment
    from rlvr.sandbox.pool import BwrapPool

    def start(image: str | None) -> float:
        t0 = time.perf_counter()
        env = None if image is None else Environment(imagecache.resolve(image), False, "host")
        with BwrapPool(workers=1, spares=0, warm=(), environment=env) as pool:
            assert pool.run(["/bin/true"]).ok
            return time.perf_counter() - t0

    host = [start(None) for _ in range(repeats)]
    image = [start(BASE) for _ in range(repeats)]
    h, i = statistics.median(host), statistics.median(image)
    return {"run_start_host_s": h, "run_start_image_s": i, "run_start_image_vs_host": i / h}


HELLO = {  # one Harbor task; its scripts name no absolute path, so the same work runs on either root
    "task.toml": 'schema_version = "1.4"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 120.0\n'
                 '[environment]\nnetwork_mode = "no-network"\n',
    "instruction.md": "Write `Hello, world!` to hello.txt; check it with `sh tests/visible.sh`.\n",
    "environment/Dockerfile": f"FROM {BASE}\nWORKDIR /app\nCOPY tests/ /app/tests/\n",
    "environment/tests/visible.sh": '[ "$(cat hello.txt)" = "Hello, world!" ] && echo PASS || echo FAIL\n',
    "tests/test.sh": 'if [ "$(cat hello.txt 2>/dev/null)" = "Hello, world!" ]; then echo 1; else echo 0; fi '
                     "> /logs/verifier/reward.txt\n",
}


def harbor_episode(episodes: int) -> dict[str, float]:
    """p50 of one scripted multi-turn episode of a Harbor task (lease, tool calls, verification), in its image
    and on the host root."""
    from rlvr.config import RolloutConfig
    from rlvr.domains.harbor.format import load_task
    from rlvr.rollout.core.runner import EnvRollouts
    from rlvr.rollout.policies.scripted import Script, ScriptedPolicy
    from rlvr.rollout.policy import SamplingParams
    from rlvr.sandbox.pool import BwrapPool
    from rlvr.verify.scorer import Scorer

    def call(name: str, **arguments: str) -> dict:
        return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}

    script = Script.model_validate({"default": [
        call("bash", command="ls -R && sh tests/visible.sh"),
        call("bash", command="echo 'Hello, world!' > hello.txt && sh tests/visible.sh"),
        call("read_file", path="hello.txt"), call("submit")]})
    fig: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-harbor-") as tmp, \
            BwrapPool(workers=2, spares=0) as pool:
        for rel, text in HELLO.items():
            (Path(tmp) / "hello" / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / "hello" / rel).write_text(text)
        in_image = load_task(Path(tmp) / "hello")
        # the image's WORKDIR holds what the host root's workspace is given
        on_host = in_image.model_copy(update={
            "image": None, "workspace": {"tests/visible.sh": HELLO["environment/tests/visible.sh"]}})
        engine = EnvRollouts(ScriptedPolicy(script), pool, Scorer(pool, cache=False),
                             config=RolloutConfig(concurrency=1, tool_workers=1),
                             sampling=SamplingParams(max_new_tokens=10_000))
        for name, task in (("harbor_image", in_image), ("harbor_host", on_host)):
            for ep in engine.run([task], 2, seed=0):  # warm the pools, build and unpack the image
                assert ep.reward == 1.0 and ep.num_turns == 4, (name, ep.status, ep.verdict)
            runs = [engine.run([task], 1, seed=i)[0] for i in range(episodes)]
            assert all(ep.reward == 1.0 for ep in runs), name
            for part in ("total", "tools", "verify"):
                fig[f"{name}_{part}_ms"] = statistics.median(ep.timings[part] for ep in runs) * 1000
    fig["harbor_image_vs_host_total"] = fig["harbor_image_total_ms"] / fig["harbor_host_total_ms"]
    return fig


ROWS = [("job start p50, /bin/true (ms)", "image_true_p50_ms", "host_true_p50_ms", "image_vs_host_true_p50"),
        ("job start p99, /bin/true (ms)", "image_true_p99_ms", "host_true_p99_ms", None),
        ("job start p50, python -c pass (ms)", "image_python_p50_ms", "host_python_p50_ms",
         "image_vs_host_python_p50"),
        ("job start p99, python -c pass (ms)", "image_python_p99_ms", "host_python_p99_ms", None),
        ("podman run --rm against the pool, p50 (ms)", "podman_run_p50_ms", "image_true_p50_ms",
         "podman_run_vs_pool_p50"),
        ("podman run --rm --network none against the pool, p50 (ms)", "podman_run_nonet_p50_ms",
         "image_true_p50_ms", "podman_run_nonet_vs_pool_p50"),
        ("build + unpack cold (s) / of which unpack", "build_unpack_cold_s", "unpack_s", None),
        ("resolve, cached Dockerfile (ms) / store reference (ms)", "resolve_cached_ms", "store_ref_cached_ms",
         None),
        ("pool start to first job: cached image vs host root (s)", "run_start_image_s", "run_start_host_s",
         "run_start_image_vs_host"),
        ("Harbor episode, 4 scripted turns + verification, p50 (ms)", "harbor_image_total_ms",
         "harbor_host_total_ms", "harbor_image_vs_host_total"),
        ("  of which the tool calls (ms)", "harbor_image_tools_ms", "harbor_host_tools_ms", None),
        ("  of which the verification (ms)", "harbor_image_verify_ms", "harbor_host_verify_ms", None)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs timed per case")
    ap.add_argument("--podman", type=int, default=15, help="podman run --rm samples")
    ap.add_argument("--starts", type=int, default=5, help="pool starts per side")
    ap.add_argument("--episodes", type=int, default=20, help="Harbor episodes timed per side")
    ap.add_argument("--only-harbor", action="store_true", help="the Harbor episode alone")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    from rlvr.sandbox import podman

    if podman.inspect(BASE) is None:
        print(f"the base image {BASE} is not in podman's store: run `make images`", file=sys.stderr)
        return 2
    fig: dict[str, float | str] = {}
    if not args.only_harbor:
        fig |= job_start(args.jobs)
        fig |= podman_start(args.podman, float(fig["image_true_p50_ms"]))
        fig |= build_and_unpack()
        fig |= run_start(args.starts)
    fig |= harbor_episode(args.episodes)
    fig |= {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in fig.items()}))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("figure", "measured", "baseline (same run)", "ratio", title=f"task images ({fig['date']})")
    for label, a, b, ratio in ROWS:
        if a not in fig:
            continue
        table.add_row(label, f"{fig[a]:.2f}", f"{fig[b]:.2f}", f"{fig[ratio]:.2f}x" if ratio else "-")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
