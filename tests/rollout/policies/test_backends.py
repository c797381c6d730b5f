"""Policy SPEC strings and configs: every backend reachable, bad specs answered in one line."""
from __future__ import annotations

import json

import pytest

from rlvr.config import PolicyConfig
from rlvr.errors import UserError
from rlvr.rollout.policies.backends import make_policy, parse_spec
from rlvr.rollout.policy import Policy


@pytest.mark.parametrize("spec, expected", [
    ("hf:./models/m", ("hf", "./models/m")), ("hf:org/name", ("hf", "org/name")),
    ("builtin:tiny", ("hf", "builtin:tiny")), ("openai:http://127.0.0.1:8000/v1#m", ("openai", "http://127.0.0.1:8000/v1#m")),
    ("scripted:a.json", ("scripted", "a.json")),
])
def test_parse_spec(spec, expected) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", "hf", "hf:", "gpt4", "vllm:", "magic:x", "openai:http://x"])
def test_bad_specs(spec) -> None:
    with pytest.raises(UserError):
        make_policy(spec)


def test_scripted_and_openai_from_spec(tmp_path) -> None:
    (tmp_path / "s.json").write_text(json.dumps(["hi"]))
    assert isinstance(make_policy(f"scripted:{tmp_path / 's.json'}"), Policy)
    pol = make_policy("openai:http://127.0.0.1:9/v1#my-model")
    assert isinstance(pol, Policy) and pol.model_name == "my-model" and pol.base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(UserError, match="not http"):
        make_policy("openai:ftp://x#m")


def test_the_context_budget_defaults_to_the_models_window(tmp_path) -> None:
    """`policy.max_context` kept 2048 on a model whose window is 16k: unset now, it is the model's window;
    set, it wins within the window."""
    from types import SimpleNamespace

    from rlvr.rollout.core.tokens import context_window
    from rlvr.rollout.policies.builtin import build_tiny_model

    wide = build_tiny_model(tmp_path / "wide", n_layer=1, n_embd=16, n_head=2, n_positions=4096, seed=1)
    assert PolicyConfig().max_context is None
    assert make_policy(PolicyConfig(backend="hf", model=str(wide), device="cpu")).max_context == 4096
    assert make_policy(PolicyConfig(backend="hf", model=str(wide), device="cpu",
                                    max_context=3000)).max_context == 3000
    # a config without positions: the tokenizer's model_max_length; its "unknown" placeholder is no window
    bare, tok = SimpleNamespace(), SimpleNamespace(model_max_length=16384)
    assert context_window(bare, tok) == 16384 and context_window(bare, tok, 8192) == 8192
    assert context_window(SimpleNamespace(max_position_embeddings=2048), tok, 9000) == 2048
    assert context_window(bare, SimpleNamespace(model_max_length=int(1e30)), 512) == 512


def test_from_config(tiny_dir) -> None:
    pol = make_policy(PolicyConfig(backend="hf", model=str(tiny_dir), device="cpu", max_context=100))
    assert pol.max_context == 100 and pol.version == 0
    with pytest.raises(UserError, match="cannot load model"):
        make_policy(PolicyConfig(backend="hf", model=str(tiny_dir / "missing"), device="cpu"))
