"""The dialects against vLLM's own tool parsers, the reference the inference servers use: the same turns,
rendered by each family's published template, must give the same calls. vLLM cannot be a dependency of the
core (it imports torch), so this runs in `make test-vllm`, where `.venv-vllm` has it."""
from __future__ import annotations

import json
import random
from typing import Any

import pytest

from rlvr.envs.dialects import DIALECTS
from rlvr.envs.messages import ToolCall
from tests.families import FAMILIES, family_tokenizer, turn_text

pytestmark = pytest.mark.vllm

VLLM_PARSER = {"qwen2.5": "hermes", "qwen3": "hermes", "qwen3-coder": "qwen3_coder", "qwen3.5": "qwen3_coder",
               "llama-3.1": "llama3_json", "deepseek-v3": "deepseek_v3", "glm-4.5": "glm45",
               "kimi-k2": "kimi_k2", "gemma-4": "gemma4"}
"""Family -> the name of vLLM's parser for it (Mistral's needs mistral_common's tokenizer, gpt-oss's the
harmony encoding's vocabulary, which is downloaded: neither runs here)."""

TOOLS = [{"type": "function", "function": {"name": n, "description": n, "parameters": {
    "type": "object", "properties": {k: {"type": "string"} for k in ("command", "path", "content")}}}}
    for n in ("run", "read_file", "write_file")]
CONTENTS = ['def f(x):\n    return "a\\\\b" if x else {\'k\': [1]}\n', "print('<b>&amp;</b>')\n", "x = 1\n"]


def _vllm_parser(name: str, tok: Any) -> Any:
    from vllm.tool_parsers import ToolParserManager

    return ToolParserManager.get_tool_parser(name)(tok)


def _request() -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "go"}], tools=TOOLS)


def _turn(rng: random.Random, single: bool) -> list[ToolCall]:
    calls = []
    for _ in range(1 if single else rng.randint(1, 3)):
        kind = rng.choice(["run", "read_file", "write_file"])
        args = {"run": {"command": rng.choice(["ls -la", "grep -rn 'x' . | head"])},
                "read_file": {"path": rng.choice(["sol.py", "src/ü.py"])},
                "write_file": {"path": "sol.py", "content": rng.choice(CONTENTS)}}[kind]
        calls.append(ToolCall(id=f"call_{len(calls)}", name=kind, arguments=args))
    return calls


@pytest.mark.parametrize("family", list(VLLM_PARSER))
def test_the_dialects_read_what_vllms_parsers_read(family: str) -> None:
    tok = family_tokenizer(family)
    d = DIALECTS[FAMILIES[family]["dialect"]]
    parser, request = _vllm_parser(VLLM_PARSER[family], tok), _request()
    user = [{"role": "user", "content": "Fix sol.py."}]
    prompt = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    for i in range(40):
        calls = _turn(random.Random(i), d.single_call)
        full = tok.apply_chat_template(user + [d.structured("Looking.", calls)], tokenize=False)
        text = turn_text(tok, family, d.markers, prompt, full)
        ours = [(c.name, c.arguments) for c in d.parse(text, TOOLS).calls]
        got = parser.extract_tool_calls(text, request)
        theirs = [(c.function.name, json.loads(c.function.arguments)) for c in got.tool_calls]
        assert ours == theirs == [(c.name, c.arguments) for c in calls], (family, text)
