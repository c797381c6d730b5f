"""The parsers of PrimeIntellect's `renderers` package, run on text.

`renderers` parses a completion's token ids, finding a family's structure by its special tokens. A turn
reaches rlvr as text (the Env, the gateway and the stored episodes hold text), so `MarkerTokenizer` stands in
for the model's tokenizer: each of the family's markers is one id and every other character an id of its own,
which is all those parsers ask of a tokenizer (`convert_tokens_to_ids`, `encode`, `decode`). The package is
imported on first use: importing it costs about a second (it imports the OpenAI SDK), which a run whose model
writes rlvr's own format never pays.
"""
from __future__ import annotations

import functools
import importlib
import re
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.envs.dialects.base import Dialect, Parsed, arguments_of, call_id
from rlvr.envs.messages import ToolCall
from rlvr.errors import UserError

STATUS_WHY = {
    "invalid_json": "has arguments that are not valid JSON",
    "unclosed_block": "is never closed",
    "missing_name": "names no tool",
    "malformed_structure": "is malformed",
}
"""What a renderers parse status means, in the words of malformed-call feedback."""


class MarkerTokenizer:
    """Text as ids: each marker one id, every other character `offset + ord(c)`; decoding joins them back."""

    def __init__(self, markers: Sequence[str], **attributes: Any) -> None:
        self.markers = sorted(set(markers), key=len, reverse=True)
        self._ids = {m: i for i, m in enumerate(self.markers)}
        self.unk_token_id = len(self.markers)
        self._offset = self.unk_token_id + 1
        self._pattern = re.compile("|".join(re.escape(m) for m in self.markers)) if self.markers else None
        self.eos_token_id = self.bos_token_id = self.pad_token_id = None
        self.name_or_path, self.chat_template = "", ""
        for key, value in attributes.items():
            setattr(self, key, value)

    def convert_tokens_to_ids(self, token: str | list[str]) -> Any:
        if isinstance(token, list):
            return [self.convert_tokens_to_ids(t) for t in token]
        return self._ids.get(token, self.unk_token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        out: list[int] = []
        pos = 0
        for m in self._pattern.finditer(text) if self._pattern else ():
            out.extend(self._offset + ord(c) for c in text[pos:m.start()])
            out.append(self._ids[m.group(0)])
            pos = m.end()
        out.extend(self._offset + ord(c) for c in text[pos:])
        return out

    def decode(self, ids: Sequence[int] | int, skip_special_tokens: bool = False, **_: Any) -> str:
        seq = [ids] if isinstance(ids, int) else ids
        return "".join(self.markers[i] if i < self.unk_token_id else "" if i == self.unk_token_id
                       else chr(i - self._offset) for i in seq)


def load(module: str) -> Any:
    """A module of the renderers package; its absence is a UserError naming the fix."""
    try:
        return importlib.import_module(f"renderers.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != "renderers" and not str(exc.name or "").startswith("renderers"):
            raise
        raise UserError("this model's tool dialect parses with the `renderers` package, which is not "
                        "installed", field="policy.tool_format",
                        fix="pip install renderers==0.1.12 (rlvr's dependency on Python 3.11 or later)"
                        ) from None


class LibraryDialect(Dialect):
    """A dialect whose parsing is a `renderers` parser: `parser()` builds it once (its tokenizer and a
    callable from token ids and tools to a ParsedResponse); `parse` reads its calls with rlvr's rules."""

    schema_typed: bool = False
    """True for forms whose arguments are untyped text: the tools' schemas decide what stays a string."""

    @abstractmethod
    def parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        """The family's `renderers` parser: its tokenizer and a callable from token ids and tools."""

    @functools.cached_property
    def _parser(self) -> tuple[MarkerTokenizer, Callable[..., Any]]:
        return self.parser()

    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None, *,
              id_prefix: str = "call") -> Parsed:
        tok, fn = self._parser
        if self.think is not None:
            opener, closer = self.think
            if closer in text and opener not in text.split(closer, 1)[0]:
                text = opener + text  # the generation prompt opened the block: the parser wants a whole turn
        resp = fn(tok.encode(text), list(tools) if tools and self.schema_typed else None)
        calls: list[ToolCall] = []
        errors: list[str] = []
        for n, tc in enumerate(resp.tool_calls):
            call, why = self._call(tc, id_prefix, n)
            if call is not None:
                calls.append(call)
            else:
                errors.append(self.call_error(n + 1, why))
        reasoning = (resp.reasoning_content or "").strip() or None
        return Parsed(calls, errors, (resp.content or "").strip(), reasoning)

    def _call(self, tc: Any, id_prefix: str, n: int) -> tuple[ToolCall | None, str]:
        """A parsed attempt as a call, or None and why it cannot run. A value that is not JSON in an untyped
        form stays text (the tool checks its type), as vLLM's parsers keep it; an unknown tool name is the
        tool table's to answer, as for every other dialect."""
        status = str(getattr(tc.status, "value", tc.status))
        if status in ("unclosed_block", "missing_name", "malformed_structure") or not tc.name:
            return None, STATUS_WHY.get(status, "names no tool")
        if status == "invalid_json" and not isinstance(tc.arguments, dict):
            return None, STATUS_WHY["invalid_json"]
        try:
            args = arguments_of(tc.arguments)
        except ValueError as exc:
            return None, f"has {exc}"
        return ToolCall(id=tc.id or call_id(id_prefix, n), name=str(tc.name),
                        arguments=self.exact(tc.raw, args)), ""

    def exact(self, raw: str, args: dict[str, Any]) -> dict[str, Any]:
        """`args` with string values as the call wrote them, where the parser trimmed them."""
        return args
