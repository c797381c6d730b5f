"""Benchmarks that need vLLM run in its own venv (`.venv-vllm`, made by `make test-vllm`): started from
another interpreter, they re-execute themselves there."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


def reexec_in_vllm_venv(script: str, needs: tuple[str, ...] = ("vllm",)) -> None:
    """Return when this interpreter has every module in `needs`; else run `script` again under .venv-vllm's
    interpreter with the same arguments (exit 2 with one line when that venv is missing)."""
    if all(importlib.util.find_spec(m) is not None for m in needs):
        return
    if not VLLM_PYTHON.exists():
        print(f"{Path(script).name} needs {' and '.join(needs)}: run `make test-vllm` once to "
              f"build .venv-vllm",
              file=sys.stderr)
        sys.exit(2)
    os.execv(str(VLLM_PYTHON), [str(VLLM_PYTHON), script, *sys.argv[1:]])
