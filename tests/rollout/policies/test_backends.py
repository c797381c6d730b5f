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


def test_from_config(tiny_dir) -> None:
    pol = make_policy(PolicyConfig(backend="hf", model=str(tiny_dir), device="cpu", max_context=100))
    assert pol.max_context == 100 and pol.version == 0
    with pytest.raises(UserError, match="cannot load model"):
        make_policy(PolicyConfig(backend="hf", model=str(tiny_dir / "missing"), device="cpu"))
