"""The built-in tiny model: a lossless character tokenizer with chat roles, deterministic random weights."""
from __future__ import annotations

import pytest
import torch

from rlvr.errors import UserError
from rlvr.rollout.policies.builtin import SPECIAL_TOKENS, build_tiny_model, build_tokenizer, resolve_builtin


def test_tokenizer_round_trips_any_text() -> None:
    tok = build_tokenizer()
    for text in ("def f(x):\n\treturn x * 2  # ok", "naïve 漢字 🙂 \x00\r\n", "<answer>4</answer>"):
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
    assert len(tok.encode("hello", add_special_tokens=False)) == 5  # one token per ASCII character


def test_special_tokens_are_single_tokens() -> None:
    tok = build_tokenizer()
    for special in SPECIAL_TOKENS:
        assert len(tok.encode(special, add_special_tokens=False)) == 1
    assert tok.eos_token == "<|end|>" and tok.pad_token == "<|pad|>" and tok.pad_token_id != tok.eos_token_id


def test_chat_template() -> None:
    tok = build_tokenizer()
    text = tok.apply_chat_template([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                                    {"role": "tool", "content": "out"}], tokenize=False,
                                    add_generation_prompt=True)
    assert text == "<|system|>s<|end|>\n<|user|>hi<|end|>\n<|tool|>out<|end|>\n<|assistant|>"


def test_build_is_deterministic_and_loads_by_path(tmp_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64}
    a = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "a", seed=1, **kw))
    b = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "b", seed=1, **kw))
    c = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "c", seed=2, **kw))
    wa, wb, wc = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert AutoTokenizer.from_pretrained(tmp_path / "a").chat_template is not None


def test_builtin_spec_is_cached(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(__import__("rlvr.rollout.policies.builtin", fromlist=["x"]).BUILTIN_MODELS, "tiny",
                        {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64})
    first = resolve_builtin("builtin:tiny", root=tmp_path)
    mtime = (first / "config.json").stat().st_mtime_ns
    assert resolve_builtin("builtin:tiny", root=tmp_path) == first
    assert (first / "config.json").stat().st_mtime_ns == mtime
    assert resolve_builtin("builtin:tiny", root=tmp_path, seed=1) != first


def test_bad_builtin_requests() -> None:
    with pytest.raises(UserError, match="unknown builtin model 'builtin:huge'"):
        resolve_builtin("builtin:huge")
    with pytest.raises(UserError, match="not divisible"):
        build_tiny_model("/nonexistent-never-created", n_embd=30, n_head=4)
