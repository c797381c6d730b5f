"""The context-budget rule: which messages are shortened when a conversation outgrows the model's context.

Rule: the leading system and user messages (the task statement) and the latest turn (the last assistant
message and everything after it) are always kept whole. Before them, tool output and environment feedback
are replaced by a one-line marker, oldest first, until the conversation fits. Assistant messages are never
changed. When even that does not fit, the episode is truncated by "context".
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from rlvr.envs.messages import Message

MARKER = "[{n} characters of older output elided to fit the context]"


def _protected(messages: Sequence[Message]) -> tuple[int, int]:
    """(end of the statement prefix, start of the latest turn)."""
    head = 0
    while head < len(messages) and messages[head].role in ("system", "user"):
        head += 1
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=len(messages))
    return head, last


def elide(messages: Sequence[Message], fits: Callable[[list[Message]], bool]) -> tuple[list[Message], int,
                                                                                       bool]:
    """Apply the rule: (messages, how many were elided, whether the result fits)."""
    out = list(messages)
    if fits(out):
        return out, 0, True
    head, last = _protected(out)
    done = 0
    for i in range(head, last):
        m = out[i]
        if m.role == "assistant" or m.elided:
            continue
        out[i] = m.model_copy(update={"content": MARKER.format(n=len(m.content)), "elided": True})
        done += 1
        if fits(out):
            return out, done, True
    return out, done, fits(out)


TOOL_CUT = "\n[... {n} tokens of output cut to fit rollout.max_tool_output_tokens ...]\n"
"""What the model sees in place of the middle of a tool output longer than
`rollout.max_tool_output_tokens`."""


def cap_tokens(text: str, limit: int, encode: Callable[[str], list[int]],
               decode: Callable[[list[int]], str]) -> tuple[str, int]:
    """`text` cut to about `limit` tokens: its first third and last two thirds kept (errors are usually at
    the end) around a visible marker saying how many tokens were cut; (text, tokens cut), 0 when it fits."""
    ids = encode(text)
    if len(ids) <= limit:
        return text, 0
    head = limit // 3
    tail = limit - head
    cut = len(ids) - head - tail
    return decode(ids[:head]) + TOOL_CUT.format(n=cut) + decode(ids[len(ids) - tail:]), cut
