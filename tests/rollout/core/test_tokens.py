"""Token records are extended turn by turn, never re-tokenized, and restart cleanly when the template
disagrees."""
from __future__ import annotations

from rlvr.envs.messages import Message
from rlvr.rollout.core.tokens import TokenStream
from rlvr.rollout.policy import Completion


def test_extension_equals_fresh_rendering_for_the_char_tokenizer(tiny) -> None:
    s = TokenStream(tiny)
    msgs = [Message(role="system", content="sys"), Message(role="user", content="task")]
    first = s.prompt(msgs)
    assert first == tiny.encode(tiny.render(msgs))
    gen = tiny.encode("answer") + [tiny.tokenizer.eos_token_id]
    s.add_completion(Completion(text="answer", token_ids=gen, logprobs=[-1.0] * len(gen)), tiny.eos_ids,
                     tiny.tokenizer.eos_token)
    msgs += [Message(role="assistant", content="answer"), Message(role="tool", content="out")]
    second = s.prompt(msgs)
    assert second == tiny.encode(tiny.render(msgs)) and s.restarts == 0
    assert s.mask == [0] * len(first) + [1] * len(gen) + [0] * (len(second) - len(first) - len(gen))
    assert s.logprobs[len(first):len(first) + len(gen)] == [-1.0] * len(gen)


def test_a_cut_turn_gets_its_end_token_from_the_template(tiny) -> None:
    s = TokenStream(tiny)
    msgs = [Message(role="user", content="q")]
    s.prompt(msgs)
    gen = tiny.encode("partial")
    s.add_completion(Completion(text="partial", token_ids=gen, logprobs=[0.0] * len(gen),
                                finish_reason="length"),
                     tiny.eos_ids, tiny.tokenizer.eos_token)
    msgs += [Message(role="assistant", content="partial"), Message(role="user", content="go on")]
    assert s.prompt(msgs) == tiny.encode(tiny.render(msgs))


class Rewriting:
    """A template that rewrites earlier assistant text (as some templates strip reasoning)."""

    max_context = 10_000

    def render(self, conversation, add_generation_prompt=True):
        parts = [m.content.upper() if m.role == "assistant" else m.content for m in conversation]
        return "|".join(parts) + ("|A:" if add_generation_prompt else "")

    def encode(self, text):
        return [ord(c) for c in text]


def test_a_template_that_rewrites_history_restarts_the_record() -> None:
    s = TokenStream(Rewriting())
    msgs = [Message(role="user", content="q")]
    s.prompt(msgs)
    s.add_completion(Completion(text="ab", token_ids=[97, 98], logprobs=[-0.5, -0.5]), frozenset(), "")
    msgs += [Message(role="assistant", content="ab"), Message(role="user", content="more")]
    ids = s.prompt(msgs)
    assert s.restarts == 1 and ids == [ord(c) for c in "q|AB|more|A:"] and set(s.mask) == {0}
