"""The elision rule: statement and latest turn kept, older tool output elided oldest first."""
from __future__ import annotations

from rlvr.envs.context import elide
from rlvr.envs.messages import Message


def convo() -> list[Message]:
    return [Message(role="system", content="S" * 10), Message(role="user", content="task"),
            Message(role="assistant", content="a1"), Message(role="tool", content="x" * 100),
            Message(role="assistant", content="a2"), Message(role="user", content="y" * 100),
            Message(role="assistant", content="a3"), Message(role="tool", content="z" * 100)]


def size(ms: list[Message]) -> int:
    return sum(len(m.content) for m in ms)


def test_fitting_conversation_is_untouched() -> None:
    ms = convo()
    out, n, fits = elide(ms, lambda m: True)
    assert (out, n, fits) == (ms, 0, True)


def test_oldest_output_goes_first() -> None:
    out, n, fits = elide(convo(), lambda m: size(m) <= 300)
    assert fits and n == 1
    assert out[3].elided and "100 characters" in out[3].content
    assert not out[5].elided and out[5].content == "y" * 100


def test_statement_assistant_and_latest_turn_are_kept() -> None:
    out, n, fits = elide(convo(), lambda m: size(m) <= 10)
    assert not fits and n == 2
    kept = [0, 1, 2, 4, 6, 7]
    assert [out[i].content for i in kept] == [convo()[i].content for i in kept]
