"""Verification latency of a small code task beside a plain `python -m pytest` of the same tests, same run.

1. `rlvr verify` path: the code verifier (static integrity scan, trusted harness in a fresh sandbox lease,
   signed result, cross-checks) on a 5-test task with the gold solution, through the warm isolated pool when
   this machine has one (else `--isolation none`).
2. The same through the unisolated pool (plain subprocesses: the harness without the sandbox's warm start).
3. Baseline: `python -m pytest -q` of the same hidden tests on the same files in a fresh subprocess, no
   isolation, no harness (what a naive verifier would run).

Run alone: `.venv/bin/python benchmarks/bench_verify.py [--reps 15] [--json]`.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from rich.progress import track

from rlvr.domains.code.verifier import CodeVerifier
from rlvr.sandbox import make_pool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext

SOLUTION = {"shapes.py": "def area(w, h):\n    if w < 0 or h < 0:\n        raise ValueError('negative')\n"
                         "    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"}
HIDDEN = {"test_shapes.py": (
    "import pytest\nfrom shapes import area, perimeter\n\n\ndef test_area():\n    assert area(2, "
    "3) == 6\n\n\n"
    "def test_zero():\n    assert area(0, 5) == 0\n\n\ndef test_perimeter():\n    assert perimeter(2, 3) "
    "== 10\n\n\n"
    "def test_negative():\n    with pytest.raises(ValueError):\n        area(-1, 2)\n\n\n"
    "@pytest.mark.parametrize('w', [1, 2])\ndef test_square(w):\n    assert area(w, w) == w * w\n")}
TASK = Task(id="shapes", domain="code", workspace={"shapes.py": "def area(w, h):\n    return 0\n"},
            hidden=HIDDEN,
            verifier={"tests": ["test_shapes.py"]}, prompt="Implement area and perimeter.")


def timed(fn: Callable[[], object], reps: int, label: str) -> list[float]:
    out = []
    for _ in track(range(reps), description=label, transient=True):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def plain_pytest(root: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shapes.py"],
                       cwd=root,
                       capture_output=True, check=False,
                       env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"})
    if r.returncode != 0:
        raise SystemExit(f"baseline pytest failed: {r.stdout[-300:]!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    final = FinalState(files={**TASK.workspace, **SOLUTION})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unsafe = make_pool(isolation="none")
    try:
        isolated = make_pool(workers=1)
        kind = "bwrap"
    except Exception:  # noqa: BLE001  (no bubblewrap here: measure the unisolated path twice)
        isolated, kind = unsafe, "none"
    root = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    for rel, text in {**final.files, **HIDDEN}.items():
        (root / rel).write_text(text)
    results: dict[str, list[float]] = {}
    try:
        for name, pool in (("verify_" + kind, isolated), ("verify_none", unsafe)):
            v = CodeVerifier(VerifyContext(pool=pool))
            warm = v.verify(TASK, final)  # warm-up, and the gold must pass
            if not warm.passed:
                raise SystemExit(f"{name}: the gold did not pass: {warm.infra_error or warm.checks}")
            results[name] = timed(lambda v=v: v.verify(TASK, final), args.reps, name)
        plain_pytest(root)
        results["plain_pytest"] = timed(lambda: plain_pytest(root), args.reps, "plain pytest")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        isolated.close()
        unsafe.close()
    med = {k: statistics.median(v) for k, v in results.items()}
    report = {f"{k}_median_s": round(m, 4) for k, m in med.items()}
    report.update({f"{k}_over_plain_pytest": round(m / med["plain_pytest"], 2) for k, m in med.items()
                   if k != "plain_pytest"})
    if args.json:
        print(json.dumps(report))
        return
    for k, m in med.items():
        ratio = "" if k == "plain_pytest" else f"  ({m / med['plain_pytest']:.2f}x plain pytest)"
        print(f"{k:>16}: median {m * 1000:7.1f} ms  min {min(results[k]) * 1000:7.1f} ms{ratio}")


if __name__ == "__main__":
    main()
