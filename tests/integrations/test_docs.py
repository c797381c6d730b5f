"""Every example in docs/INTEGRATIONS.md runs as written (each in its own interpreter)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.servers import free_port

pytestmark = pytest.mark.integrations

DOC = Path(__file__).resolve().parents[2] / "docs" / "INTEGRATIONS.md"
EXAMPLES = dict(re.findall(r"```python\n# example: (\w+)\n(.*?)```", DOC.read_text(), re.DOTALL))
EXPECT = {"openenv": "(0.0, False)", "trl": "0.0", "skyrl": "True 0.0 False", "verl": "'score': 1.0",
          "verifiers": "rewards: [0.0, 0.0]", "agent": "episodes: 2 masked: 0"}


def test_every_trainer_has_an_example() -> None:
    assert set(EXAMPLES) == set(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_example_runs(name: str, tmp_path: Path) -> None:
    code = EXAMPLES[name].replace("18410", str(free_port()))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert EXPECT[name] in proc.stdout, proc.stdout
