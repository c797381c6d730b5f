"""The core imports without torch: every module of the core packages, in a process where torch cannot load."""
from __future__ import annotations

import subprocess
import sys
import textwrap

CORE = ["tasks", "sandbox", "envs", "verify", "domains", "schedule", "store", "monitor"]

SCRIPT = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class Block:
        BLOCKED = ("torch", "transformers", "peft", "trl", "vllm")
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.BLOCKED:
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Block())
    import rlvr, rlvr.cli, rlvr.config, rlvr.errors, rlvr.run
    seen = []
    for pkg in %r:
        mod = importlib.import_module("rlvr." + pkg)
        seen.append(mod.__name__)
        for info in pkgutil.walk_packages(mod.__path__, prefix=mod.__name__ + "."):
            importlib.import_module(info.name)
            seen.append(info.name)
    from rlvr.tasks import registry
    registry.names()  # built-in domains register without torch
    assert not any(m.split(".")[0] in Block.BLOCKED for m in sys.modules), "a blocked module was imported"
    print(len(seen))
    """
)


def test_core_imports_without_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT % (CORE,)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.strip().splitlines()[-1]) >= len(CORE)
