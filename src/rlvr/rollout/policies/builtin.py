"""The small model rlvr builds from scratch for the quickstart: a character-level tokenizer and a tiny GPT-2.

Nothing is downloaded: the tokenizer's vocabulary is fixed (special tokens, printable ASCII, newline and tab,
and 256 byte-fallback tokens so that any text round-trips), and the weights are randomly initialised from a
seed, so the same arguments always give the same model. `policy.model = "builtin:tiny"` resolves to a cached
build under `$RLVR_CACHE` (default `~/.cache/rlvr`).
"""
from __future__ import annotations

import hashlib
import json
import os
import string
from pathlib import Path

from rlvr.atomic import atomic_dir
from rlvr.errors import UserError

SPECIAL_TOKENS: tuple[str, ...] = ("<|pad|>", "<|end|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>",
                                   "<|tool|>")
"""Single-token specials: padding, end of turn (also eos), unknown, and the chat-role markers."""

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""Compact chat template: `<|role|>content<|end|>` per message, newline-separated; the model ends a turn with
`<|end|>` (its eos token)."""

BUILTIN_MODELS: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 4, "n_embd": 128, "n_head": 4, "n_positions": 512},
}
"""Named sizes for `builtin:NAME` model specs."""


def _vocab() -> dict[str, int]:
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]  # printable ASCII incl. space, \n, \t
    tokens = list(SPECIAL_TOKENS) + [f"<0x{b:02X}>" for b in range(256)] + chars
    return {tok: i for i, tok in enumerate(tokens)}


def build_tokenizer():  # -> PreTrainedTokenizerFast (transformers imported lazily)
    """The character-level tokenizer with byte fallback and the compact chat template."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = _vocab()
    # BPE without merges over single characters is a character tokenizer; byte_fallback spells any other
    # character as its UTF-8 bytes, so decoding is lossless.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<|unk|>", byte_fallback=True))
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|pad|>", eos_token="<|end|>",
                                  unk_token="<|unk|>", bos_token=None,
                                  additional_special_tokens=[t for t in SPECIAL_TOKENS[3:]])
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    tok.model_max_length = 1 << 30
    return tok


def build_tiny_model(path: str | Path, *, n_layer: int = 4, n_embd: int = 128, n_head: int = 4,
                     n_positions: int = 512, seed: int = 0) -> Path:
    """Build the tokenizer and a randomly initialised GPT-2 at `path` (save_pretrained), deterministic for the
    seed.

    The directory loads like any local model: `AutoModelForCausalLM.from_pretrained(path)`.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    if n_embd % n_head:
        raise UserError(f"n_embd={n_embd} is not divisible by n_head={n_head}", field="builtin model",
                        fix="choose n_embd as a multiple of n_head")
    path = Path(path)
    tok = build_tokenizer()
    cfg = GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                     n_head=n_head,
                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id,
                     tie_word_embeddings=True, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    # no dropout: RL ratios compare the sampling pass with the trainer's pass, which must be the same function
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(cfg)
    finally:
        torch.random.set_rng_state(state)  # building a model must not disturb the caller's random stream
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def cache_dir() -> Path:
    """Where builtin models are cached: `$RLVR_CACHE` or `~/.cache/rlvr`."""
    return Path(os.environ.get("RLVR_CACHE") or Path.home() / ".cache" / "rlvr")


def resolve_builtin(spec: str, *, seed: int = 0, root: str | Path | None = None) -> Path:
    """`builtin:NAME` -> the path of a cached build (built on first use, atomically)."""
    name = spec.split(":", 1)[1] if spec.startswith("builtin:") else spec
    if name not in BUILTIN_MODELS:
        raise UserError(f"unknown builtin model {spec!r}", field="policy.model",
                        fix=f"known: {', '.join('builtin:' + n for n in BUILTIN_MODELS)}")
    kw = BUILTIN_MODELS[name]
    key = hashlib.sha256(json.dumps({**kw, "seed": seed, "vocab": len(_vocab()), "v": 2},
                                    sort_keys=True).encode()).hexdigest()[:12]
    target = Path(root or cache_dir()) / "models" / f"{name}-{key}"
    if (target / "config.json").is_file():
        return target
    try:
        with atomic_dir(target) as tmp:
            build_tiny_model(tmp, seed=seed, **kw)
    except OSError:  # another process finished the same build first
        if not (target / "config.json").is_file():
            raise
    return target
