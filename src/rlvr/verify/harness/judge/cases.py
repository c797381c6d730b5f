"""Trusted case drawer: draws fresh inputs with the task's generator and computes the reference outputs.

A standalone script run in a sandbox that holds only the task's hidden generator and reference (never the
candidate's code); the host keeps the outputs and sends the candidate only the inputs.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [HERE] + [p for p in sys.path if p not in ("", ".", os.getcwd(), HERE)]
from _rlvr_values import encode


def _load(path: str, name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    data = bytearray()
    while (b := os.read(0, 1)) and b != b"\n":  # one line from fd 0 itself, not waiting for end of input
        data += b
    cfg = json.loads(data)
    gen = _load(cfg["generator"], "_rlvr_generator")
    ref = getattr(_load(cfg["reference"], "_rlvr_reference"), cfg["function"])
    rng = random.Random(cfg["seed"])
    inputs, outputs = [], []
    for _ in range(cfg["n"]):
        args = gen.generate(rng)
        enc_args = encode(args)
        if enc_args is None or not isinstance(args, (list, tuple, dict)):
            raise SystemExit("generate(rng) must return plain positional args (a list) or keyword args (a dict)")
        inputs.append(encode(list(args) if isinstance(args, tuple) else args)["v"])
        out = encode(ref(*args) if isinstance(args, (list, tuple)) else ref(**args))
        if out is None:
            raise SystemExit("the reference returned a value that is not plain data")
        outputs.append(out["v"])
    sys.stdout.write(json.dumps({"inputs": inputs, "outputs": outputs}) + "\n")


if __name__ == "__main__":
    main()
