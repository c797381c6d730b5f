"""The hf backend places its model's tool dialect from the chat template it renders with
(`policy.tool_format = "auto"`), takes a named one, and refuses a template it cannot place in one line naming
the setting."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.envs.dialects import HERMES
from rlvr.errors import UserError
from rlvr.rollout.policies.hf import HFPolicy
from tests.families import ASSETS, FAMILIES


def _load(tiny_dir: Path, **kw: str) -> HFPolicy:
    return HFPolicy(tiny_dir, device="cpu", threads=1, **kw)


@pytest.mark.parametrize("family", ["qwen3-coder", "gpt-oss", "mistral-small-3.2"])
def test_auto_places_the_chat_templates_family(tiny_dir: Path, family: str) -> None:
    policy = _load(tiny_dir, chat_template=str(ASSETS / FAMILIES[family]["template"]))
    assert policy.dialect.name == FAMILIES[family]["dialect"]


def test_the_builtin_template_keeps_rlvrs_format_and_a_name_overrides(tiny_dir: Path) -> None:
    assert _load(tiny_dir).dialect is HERMES
    assert _load(tiny_dir, tool_format="glm45").dialect.name == "glm45"


def test_an_unplaceable_template_or_unknown_name_is_one_line(tiny_dir: Path) -> None:
    with pytest.raises(UserError, match=r"policy\.tool_format") as err:
        _load(tiny_dir, chat_template=str(ASSETS / "deepseek-v3.1.jinja"))
    assert "\n" not in str(err.value) and str(tiny_dir) in str(err.value)
    with pytest.raises(UserError, match=r"policy\.tool_format.*glm45") as err:
        _load(tiny_dir, tool_format="glm4.5")
    assert "\n" not in str(err.value)
