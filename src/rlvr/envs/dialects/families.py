"""The families whose parsing is a `renderers` parser: Qwen3-Coder / Qwen3.5 XML, GLM-4.5, Kimi K2, DeepSeek
V3 and gpt-oss harmony. Each names its markers, builds its parser, and writes calls as its chat template
renders them."""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.envs.dialects.base import Parsed, openai_calls
from rlvr.envs.dialects.library import LibraryDialect, MarkerTokenizer, load
from rlvr.envs.messages import Message, ToolCall


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text_value(value: Any) -> str:
    """An argument in an XML form: a string as it is, anything else as JSON (as the templates write it)."""
    return value if isinstance(value, str) else _json(value)


def _untrimmed(pattern: re.Pattern[str], raw: str, args: dict[str, Any]) -> dict[str, Any]:
    """String values read again from the call's text without trimming their whitespace: renderers strips XML
    values (a file's final newline, a first line's indentation), where vLLM's parsers drop only the newline
    the template writes around a value."""
    out = dict(args)
    for key, value in pattern.findall(raw):
        if isinstance(out.get(key), str) and value.strip() == out[key]:
            out[key] = value
    return out


def _renderer(module: str, cls: str, markers: Sequence[str]) -> tuple[MarkerTokenizer, Callable[..., Any]]:
    tok = MarkerTokenizer(markers)
    renderer = getattr(load(module), cls)(tok)
    return tok, lambda ids, tools: renderer.parse_response(ids, tools=tools)


QWEN_MARKERS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                "</tool_call>", "<tool_response>", "</tool_response>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>")


class Qwen3Coder(LibraryDialect):
    name = "qwen3_coder"
    models = "Qwen3-Coder, Qwen3.5 and later Qwen3 releases, Nemotron 3 (the same XML)"
    markers = ("<tool_call>", "</tool_call>", "<think>", "</think>")
    signature = ("<function=", "<parameter=")
    schema_typed = True
    history = ("the template drops the reasoning of turns before the last real user message (a tool result "
               "is not one): an Env feedback message, which is a user message, rewrites earlier turns")

    def parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        return _renderer("qwen35", "Qwen35Renderer", QWEN_MARKERS)

    def exact(self, raw: str, args: dict[str, Any]) -> dict[str, Any]:
        return _untrimmed(re.compile(r"<parameter=([^>]+)>\n?(.*?)\n?</parameter>", re.DOTALL), raw, args)

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        params = "".join(f"<parameter={k}>\n{_text_value(v)}\n</parameter>\n"
                         for k, v in call.arguments.items())
        return f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        body = "\n".join(self.format_call(c) for c in calls)
        return content + ("\n\n" if content and calls else "") + body


class GLM45(LibraryDialect):
    name = "glm45"
    models = "GLM-4.5, GLM-4.6, GLM-4.7"
    markers = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
               "<think>", "</think>")
    signature = ("<arg_key>", "<arg_value>")
    schema_typed = True
    turn_end = "<|observation|>"
    history = ("the template keeps the reasoning of turns after the last user message only (an Env feedback "
               "message rewrites earlier turns) and renders an assistant turn's text stripped")

    def parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        # The function, not GLM45Renderer: that one assumes a generation prompt that opens <think>, which the
        # published GLM-4.5 template does not write (the model opens its block itself).
        parse = load("parsing").parse_glm
        tok = MarkerTokenizer(("<|endoftext|>", "<|user|>", "<|observation|>", *self.markers))
        ids = {k: tok.convert_tokens_to_ids(f"<{m}>") for k, m in (
            ("think_id", "think"), ("think_end_id", "/think"), ("tool_call_id", "tool_call"),
            ("tool_call_end_id", "/tool_call"), ("arg_key_id", "arg_key"), ("arg_key_end_id", "/arg_key"),
            ("arg_value_id", "arg_value"), ("arg_value_end_id", "/arg_value"))}
        stops = {tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>")}
        return tok, lambda token_ids, tools: parse(tok, token_ids, stop_ids=stops, tools=tools, **ids)

    def exact(self, raw: str, args: dict[str, Any]) -> dict[str, Any]:
        pattern = re.compile(r"<arg_key>\s*(.*?)\s*</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
        return _untrimmed(pattern, raw, args)

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        args = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_text_value(v)}</arg_value>\n"
                       for k, v in call.arguments.items())
        return f"<tool_call>{call.name}\n{args}</tool_call>"

    @property
    def hint(self) -> str:
        return self.format_call(ToolCall(name="TOOL", arguments={"ARG": "VALUE"}))

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        parts = ["\n<think></think>"] + (["\n" + content.strip()] if content.strip() else [])
        return "".join(parts + ["\n" + self.format_call(c) for c in calls])


class KimiK2(LibraryDialect):
    name = "kimi_k2"
    models = "Kimi K2 (Instruct, Thinking)"
    markers = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
               "<|tool_call_argument_begin|>", "<|tool_call_end|>")
    signature = ("<|tool_calls_section_begin|>",)
    think = None
    history = "the template prints an assistant turn's text verbatim: the record extends across turns"

    def parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        return _renderer("kimi_k2", "KimiK2Renderer", (
            "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<|im_end|>", *self.markers))

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        return (f"<|tool_call_begin|>functions.{call.name}:{index}<|tool_call_argument_begin|>"
                f"{_json(call.arguments)}<|tool_call_end|>")

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        if not calls:
            return content
        body = "".join(self.format_call(c, i) for i, c in enumerate(calls))
        return f"{content}<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


def _ds(name: str) -> str:
    """A DeepSeek special token: `<｜name｜>` with fullwidth bars and `▁` for `_`."""
    return "<\uff5c" + name.replace("_", "\u2581") + "\uff5c>"


class DeepSeekV3(LibraryDialect):
    name = "deepseek_v3"
    models = "DeepSeek V3 and R1 (V3.1's form differs and is not covered)"
    markers = tuple(_ds(n) for n in ("tool_calls_begin", "tool_calls_end", "tool_call_begin", "tool_call_end",
                                     "tool_sep"))
    signature = (_ds("tool_calls_begin"), _ds("tool_sep"), "```json")
    history = ("the template renders a turn that follows the user without its reasoning (everything up to "
               "`</think>` is dropped), and turns after tool output verbatim")

    def parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        names = ("begin_of_sentence", "end_of_sentence", "User", "Assistant", "tool_calls_begin",
                 "tool_calls_end", "tool_call_begin", "tool_call_end", "tool_sep", "tool_outputs_begin",
                 "tool_outputs_end", "tool_output_begin", "tool_output_end")
        return _renderer("deepseek_v3", "DeepSeekV3Renderer", [_ds(n) for n in names])

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        body = f"{call.name}\n```json\n{_json(call.arguments)}\n```"
        return f"{_ds('tool_call_begin')}function{_ds('tool_sep')}{body}{_ds('tool_call_end')}"

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        if not calls:
            return content
        body = "\n".join(self.format_call(c) for c in calls)
        return f"{content}{_ds('tool_calls_begin')}{body}{_ds('tool_calls_end')}"

    def structured(self, content: str, calls: Sequence[ToolCall],
                   reasoning: str | None = None) -> dict[str, Any]:
        out = super().structured(content, calls, reasoning)
        if calls:  # the template joins the arguments into the text: a JSON string
            out["tool_calls"] = openai_calls(calls, string_arguments=True)
        return out


HARMONY = ("<|start|>", "<|end|>", "<|return|>", "<|call|>", "<|channel|>", "<|message|>", "<|constrain|>")


class GptOss(LibraryDialect):
    name = "gpt_oss"
    models = "gpt-oss (OpenAI harmony)"
    markers = HARMONY
    signature = ("<|channel|>", "functions.")
    think = None
    single_call = True
    turn_end = "<|call|>"
    history = ("the template writes the recipient before the channel (`<|start|>assistant "
               "to=functions.NAME<|channel|>commentary json<|message|>`) where the model writes it after "
               "(`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`), re-serialises the "
               "arguments, and drops the analysis of tool turns once a final answer follows: the record "
               "starts a new segment at each turn the model did not write in the template's own order")

    def parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        # The function, not GptOssRenderer: the renderer loads harmony's encoding, which downloads its
        # vocabulary.
        parse = load("parsing").parse_gpt_oss
        tok = MarkerTokenizer(HARMONY)
        ids = {k: tok.convert_tokens_to_ids(f"<|{k}|>") for k in ("return", "call", "start", "end", "channel",
                                                                   "message", "constrain")}
        return tok, lambda token_ids, tools: parse(tok, token_ids, **{f"{k}_id": v for k, v in ids.items()})

    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None, *,
              id_prefix: str = "call") -> Parsed:
        if "<|message|>" not in text:  # no harmony message at all: plain text (a scripted answer, say)
            return Parsed(content=text.strip())
        # a turn starts after the generation prompt's `<|start|>assistant`; the parser reads whole messages
        head = text.lstrip()
        return super().parse(text if head.startswith("<|start|>") else "<|start|>assistant" + text, tools,
                             id_prefix=id_prefix)

    def format_call(self, call: ToolCall, index: int = 0) -> str:
        return (f"<|channel|>commentary to=functions.{call.name} <|constrain|>json<|message|>"
                f"{_json(call.arguments)}<|call|>")

    def format_turn(self, calls: Sequence[ToolCall], content: str = "") -> str:
        if not calls:
            return f"<|channel|>final<|message|>{content}"
        parts = [f"<|channel|>analysis<|message|>{content}<|end|>"] if content else []
        parts += [self.format_call(c) for c in calls]
        return "<|start|>assistant".join(parts)

    def message_dict(self, message: Message) -> dict[str, Any]:
        parsed = self.parse(message.content)  # the template refuses channel markers in its texts
        return self.structured(parsed.content, parsed.calls, parsed.reasoning)

    def structured(self, content: str, calls: Sequence[ToolCall],
                   reasoning: str | None = None) -> dict[str, Any]:
        """Harmony as the template takes it: the analysis as `thinking`, the final answer as `content`, one
        call as `tool_calls` (beside a call the template takes one text only, and renders the first call
        only)."""
        if not calls:
            return {"role": "assistant", "content": content, **({"thinking": reasoning} if reasoning else {})}
        thinking = "\n".join(t for t in (reasoning, content) if t)
        return {"role": "assistant", "content": "", "tool_calls": openai_calls(calls[:1]),
                **({"thinking": thinking} if thinking else {})}

