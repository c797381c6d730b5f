"""Convert a GGUF model file into a normal Hugging Face model directory that every rlvr backend loads.

transformers reads GGUF (`from_pretrained(dir, gguf_file=NAME)`, with the `gguf` and `accelerate` packages:
`pip install 'rlvr[real]'`) and dequantizes the weights to float, but a model loaded that way refuses
`save_pretrained`. A fresh model built from the same config, without its `quantization_config`, takes the
loaded state dict key for key and saves as an ordinary directory (config, safetensors, tokenizer).

    python -m rlvr.rollout.policies.gguf MODEL.gguf OUT_DIR

The directory is written next to OUT_DIR and renamed into place when complete, so an interrupted conversion
leaves no half-written model behind, and a second run with a complete OUT_DIR does nothing.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rlvr.atomic import atomic_dir
from rlvr.errors import UserError

MARKER = "config.json"
"""The file whose presence marks a complete output directory (it is renamed into place with the rest)."""


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, *, dtype: str = "float32",
                 progress: Callable[[str], None] = _say) -> Path:
    """Write `out_dir` as a Hugging Face model directory holding the dequantized weights of `gguf_path`."""
    src, out = Path(gguf_path), Path(out_dir)
    if (out / MARKER).is_file():
        progress(f"{out}: already converted")
        return out
    if not src.is_file() or src.suffix != ".gguf":
        raise UserError("not a .gguf file", file=src, fix="give the path of a GGUF model file")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ModuleNotFoundError as exc:
        raise UserError(f"converting GGUF needs {exc.name}", file=src,
                        fix="pip install 'rlvr[train,real]'") from None
    hf_logging.disable_progress_bar()
    t0 = time.perf_counter()
    steps = 4

    def step(i: int, what: str) -> None:
        progress(f"[{i}/{steps}] {what} ({time.perf_counter() - t0:.0f} s)")

    step(1, f"reading and dequantizing {src.name}")
    try:
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    except (ImportError, OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot read the GGUF model: {first}", file=src,
                        fix="install gguf and accelerate (pip install 'rlvr[real]') and give a GGUF causal LM"
                        ) from None
    step(2, "rebuilding the model without its quantization config")
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    del loaded
    # an existing `out` is an incomplete earlier output (no MARKER)
    with atomic_dir(out, replace=True) as tmp:
        tmp.chmod(0o755)  # mkdtemp's 0700 would make the model private to its builder
        step(3, f"saving {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        step(4, f"moving into place at {out}")
    progress(f"wrote {out} in {time.perf_counter() - t0:.0f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.rollout.policies.gguf",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("gguf", help="the .gguf model file")
    parser.add_argument("out_dir", help="the Hugging Face model directory to write")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    try:
        convert_gguf(args.gguf, args.out_dir, dtype=args.dtype)
    except UserError as exc:
        _say(f"error: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
