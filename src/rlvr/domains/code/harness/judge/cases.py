"""Trusted case drawer: draws fresh inputs with the task's generator and computes the reference outputs.

A standalone script run in a sandbox that holds only the task's hidden generator and reference, or the task's
reference solution (never the candidate's code); the host keeps the outputs and sends the candidate only the
inputs. Config keys: `generator`, `reference`, `function`, `seed`, `n` (draw with the generator), or `ref_dir`
and `entry` with given `inputs` (a reference solution's workspace, run from its own directory); `extra`:
more given inputs (probes). A given input the reference raises on gets None as its output (it is not judged).
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [HERE] + [p for p in sys.path if p not in ("", ".", os.getcwd(), HERE)]
from _rlvr_values import decode, encode


def _load(path: str, name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference(cfg: dict) -> object:
    if cfg.get("ref_dir"):
        ref_dir = os.path.abspath(cfg["ref_dir"])
        sys.path[0:0] = [ref_dir] + [os.path.join(ref_dir, r) for r in cfg.get("roots", [])]
        os.chdir(ref_dir)
        module, _, function = cfg["entry"].partition(":")
        return getattr(importlib.import_module(module), function)
    return getattr(_load(cfg["reference"], "_rlvr_reference"), cfg["function"])


def _given(ref: object, inputs: list) -> list:
    out = []
    for raw in inputs:
        args = decode(raw)
        try:
            enc = encode(ref(*args) if isinstance(args, list) else ref(**args))
        except Exception:  # noqa: BLE001  (outside the reference's domain: not judged)
            enc = None
        out.append(enc["v"] if enc is not None else None)
    return out


def main() -> None:
    data = bytearray()
    while (b := os.read(0, 1)) and b != b"\n":  # one line from fd 0 itself, not waiting for end of input
        data += b
    cfg = json.loads(data)
    gen = _load(cfg["generator"], "_rlvr_generator") if cfg.get("generator") else None
    ref = _reference(cfg)
    inputs, outputs = [], []
    rng = random.Random(cfg.get("seed", 0))
    for _ in range(cfg.get("n", 0) if gen is not None else 0):
        args = gen.generate(rng)
        enc_args = encode(args)
        if enc_args is None or not isinstance(args, (list, tuple, dict)):
            raise SystemExit("generate(rng) must return plain positional args (a list) or keyword "
                             "args (a dict)")
        inputs.append(encode(list(args) if isinstance(args, tuple) else args)["v"])
        out = encode(ref(*args) if isinstance(args, (list, tuple)) else ref(**args))
        if out is None:
            raise SystemExit("the reference returned a value that is not plain data")
        outputs.append(out["v"])
    if gen is None:
        inputs, outputs = cfg.get("inputs", []), _given(ref, cfg.get("inputs", []))
    result = {"inputs": inputs, "outputs": outputs, "extra": _given(ref, cfg.get("extra", []))}
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
