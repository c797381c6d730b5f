"""`make gpu-check` on a machine without a GPU: one line, exit 0 (the checks themselves need the GPU)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path) -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True,
                         text=True,
                         timeout=120, check=False, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    want = "gpu-check: no NVIDIA GPU here (torch sees no CUDA device); nothing to check"
    assert res.stdout.strip().splitlines() == [want]
    assert not any(tmp_path.iterdir())


def test_a_check_that_fails_or_hangs_is_a_result_not_a_crash(monkeypatch) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_check

    result = gpu_check.run_check("nccl_update", timeout_s=0.01)
    assert result["ok"] is False and "did not finish" in result["error"]
