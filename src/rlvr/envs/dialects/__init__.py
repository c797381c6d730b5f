"""Tool dialects: how each model family writes tool calls and reasoning in its own text
(`DIALECTS["qwen3_coder"]`), and which one a chat template speaks (`detect`, `resolve`).

A dialect parses a model turn (`parse(text) -> Parsed`: calls, malformed-call errors, content, reasoning),
writes calls in the family's form (`format_call`, `format_turn`, the feedback `hint`), places a chat template
(`detect`) and gives the family's template an earlier assistant turn the way it takes one (`message_dict`).
The Env parses the model's turns with the episode's dialect; the policy backends keep its markers when they
decode a turn and render with it; gold trajectories, the gateway, the report and the exports read and write
through it. docs/DIALECTS.md says which library parses which family, and why.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from rlvr.envs.dialects.base import Dialect, Parsed
from rlvr.envs.dialects.families import GLM45, DeepSeekV3, GptOss, KimiK2, Qwen3Coder
from rlvr.envs.dialects.gemma import Gemma4
from rlvr.envs.dialects.hermes import Hermes
from rlvr.envs.dialects.llama3 import Llama3
from rlvr.envs.dialects.mistral import Mistral, MistralV3
from rlvr.errors import UserError

__all__ = ["AUTO", "DIALECTS", "HERMES", "Dialect", "Parsed", "detect", "get", "of_episode", "resolve"]

DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    GptOss(), KimiK2(), DeepSeekV3(), GLM45(), Qwen3Coder(), Gemma4(), Mistral(), MistralV3(), Llama3(),
    Hermes())}
"""Every dialect by name, in the order `detect` tries them: the most specific signature first (GLM's and
Qwen3.5's templates hold `<tool_call>` too)."""

HERMES = DIALECTS["hermes"]
"""rlvr's own format: models without a tool family of their own write it."""

AUTO = "auto"
"""`policy.tool_format = "auto"`: the dialect of the model's chat template."""

_CALLS = re.compile(r"\btool_calls\b")
"""A template that reads an assistant message's `tool_calls` writes calls in some form of its own."""


def get(name: str) -> Dialect:
    """The dialect called `name`; an unknown name is a UserError with the nearest one."""
    if name in DIALECTS:
        return DIALECTS[name]
    near = difflib.get_close_matches(name, list(DIALECTS), n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise UserError(f"unknown tool format {name!r}", field="policy.tool_format",
                    fix=f"{hint}use auto or one of {', '.join(DIALECTS)}")


def _text(template: str | Mapping[str, str] | None) -> str:
    """A chat template's source; a tokenizer's named templates are read together."""
    if isinstance(template, Mapping):
        return "\n".join(str(t) for t in template.values())
    return template or ""


def detect(template: str | Mapping[str, str] | None) -> Dialect | None:
    """The dialect whose calls `template` writes, or None when it writes none that rlvr knows."""
    text = _text(template)
    return next((d for d in DIALECTS.values() if d.detect(text)), None)


def resolve(choice: str, template: str | Mapping[str, str] | None, *, model: str | None = None) -> Dialect:
    """The dialect `policy.tool_format = choice` selects for a model with `template`: a name, or `auto`, which
    places the template; a template that writes no calls of its own (the built-in model's, a base model's, one
    that only lists the tools) keeps rlvr's own format, and one that writes them in a form no dialect knows is
    a UserError naming the setting."""
    if choice != AUTO:
        return get(choice)
    found = detect(template)
    if found is not None:
        return found
    if not _CALLS.search(_text(template)):
        return HERMES
    raise UserError("its chat template writes tool calls in a form no tool dialect recognises",
                    file=model or "the model", field="policy.tool_format",
                    fix=f"set policy.tool_format to the model family's form: one of {', '.join(DIALECTS)}")


def of_episode(metadata: Mapping[str, Any]) -> Dialect:
    """The dialect a stored episode's turns were parsed with (`metadata["tool_format"]`; rlvr's own before it
    was recorded)."""
    return DIALECTS.get(str(metadata.get("tool_format") or HERMES.name), HERMES)
