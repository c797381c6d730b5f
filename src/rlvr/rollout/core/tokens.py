"""The token record of one episode, built turn by turn so that training sees exactly what was sampled.

Invariant: every token with loss_mask 1 was sampled by the policy right after exactly the tokens before it in
`ids`, and `logprobs` holds its behaviour log-prob. Prompts are extended, never re-tokenized: the next turn's
prompt is the previous prompt, the generated tokens as sampled, then the tokens of the chat template's text
that follows the assistant message (less the end-of-turn token the model already sampled, whichever of its end
tokens that was). When the template rewrites earlier text (or older output is elided to
fit the context), the stream restarts from a fresh rendering, where earlier generated tokens have loss_mask 0
(their log-probs were taken under a different prefix); the record it held is kept as a segment of its own
(`segments`), which trains those tokens after exactly the prefix they were sampled after.

The model's family speaks a tool dialect (`rlvr.envs.dialects`, `ChatTemplateCodec.dialect`): a turn is
decoded with the dialect's markers kept (the Env parses them), and an earlier turn goes to the template the
way the family's template takes it (its text as sampled, or its calls as `tool_calls`). Which families'
templates rewrite earlier turns, and so start a new segment, is in docs/DIALECTS.md.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rlvr.envs.dialects import HERMES, Dialect
from rlvr.envs.messages import Message, ToolCall, message_dicts
from rlvr.errors import UserError
from rlvr.rollout.policies.builtin import CHAT_TEMPLATE
from rlvr.rollout.policy import Completion, SamplingParams

PLAIN = "plain"
"""`policy.chat_template = "plain"`: the compact template, `<|role|>content<|end|>` per message
(rlvr.rollout.policies.builtin). The built-in model has these markers as single tokens; any other model reads
them as ordinary text."""

TRUSTED = ("assistant", "system")
"""Roles whose contents keep the dialect's markers when rendered: the model's own turns (the markers it
sampled) and the system prompt (rlvr's, which shows them). A tool's output or a user message never gets a
special token."""
AUTO = "auto"
"""`policy.chat_template = "auto"`: the tokenizer's own template; a tokenizer without one gets `plain`."""


@runtime_checkable
class ChatEncoder(Protocol):
    """A policy that can render and tokenize conversations (the `hf` backend; `scripted` with a tokenizer)."""

    max_context: int

    def render(self, conversation: Sequence[Message], add_generation_prompt: bool = True) -> str:
        """The conversation as text; an encoder whose template takes tools also accepts `tools=` (a list of
        OpenAI tool specs), which TokenStream passes only when the episode has tools."""
        ...

    def encode(self, text: str) -> list[int]:
        ...


UNKNOWN_LENGTH = 1 << 30
"""Above this a tokenizer's `model_max_length` is transformers' placeholder for "not recorded", not a
window."""


def context_window(model_config: Any, tokenizer: Any, max_context: int | None = None) -> int:
    """The tokens a policy holds (prompt plus generation): `policy.max_context` when set, within the model's
    own window (its config's `max_position_embeddings` or `n_positions`, else the tokenizer's
    `model_max_length`); unset, the window itself."""
    window = (getattr(model_config, "max_position_embeddings", None)
              or getattr(model_config, "n_positions", None) or getattr(tokenizer, "model_max_length", None))
    if not isinstance(window, int) or window <= 0 or window >= UNKNOWN_LENGTH:
        window = None
    return min(x for x in (max_context, window, UNKNOWN_LENGTH) if x)


def choose_chat_template(tokenizer: Any, choice: str, model: str) -> str | dict[str, str]:
    """The chat template `policy.chat_template` selects: `auto`, `plain`, or the path of a Jinja file."""
    if choice == AUTO:
        return getattr(tokenizer, "chat_template", None) or CHAT_TEMPLATE
    if choice == PLAIN:
        return CHAT_TEMPLATE
    path = Path(choice).expanduser()
    if not path.is_file():
        raise UserError(f"chat template {choice!r} is neither auto, plain nor a file", file=model,
                        field="policy.chat_template",
                        fix='use "auto", "plain" or the path of a Jinja template file')
    return path.read_text(encoding="utf-8")


def end_texts(tokenizer: Any, eos_ids: frozenset[int]) -> tuple[str, ...]:
    """The text of each token that ends a turn (what a chat template writes after an assistant's content)."""
    texts = (tokenizer.convert_ids_to_tokens(int(i)) for i in sorted(eos_ids))
    return tuple(t for t in texts if isinstance(t, str) and t)


def template_takes_tools(template: str | dict[str, str] | None) -> bool:
    """True when the template reads the `tools` variable (it renders tool schemas natively)."""
    if isinstance(template, dict):
        return any(template_takes_tools(t) for t in template.values())
    if not template:
        return False
    import jinja2
    from jinja2 import meta

    try:
        return "tools" in meta.find_undeclared_variables(jinja2.Environment().parse(template))
    except jinja2.TemplateError:
        return False


class ChatTemplateCodec:
    """render / encode / decode through a Hugging Face tokenizer (`self.tokenizer`), shared by the local
    backends.

    Special-token strings inside message contents are defused (a zero-width space after their first
    character), so tool output written by candidate code cannot forge role markers or an end of turn.
    """

    tokenizer: Any
    max_context: int
    dialect: Dialect = HERMES
    """The model family's tool dialect (`policy.tool_format`): how its turns are decoded and rendered back."""

    @functools.cached_property
    def _specials(self) -> list[str]:
        return sorted({t for t in self.tokenizer.all_special_tokens if len(t) > 1}, key=len, reverse=True)

    def _defuse(self, text: str, keep: Sequence[str] = ()) -> str:
        for special in self._specials:
            if special in text and special not in keep:
                text = text.replace(special, special[0] + "\u200b" + special[1:])
        return text

    @functools.cached_property
    def _dropped_ids(self) -> frozenset[int]:
        """Special tokens a decoded turn leaves out: all of them but the dialect's markers."""
        tok = self.tokenizer
        special = set(tok.all_special_ids) | {i for i, t in getattr(tok, "added_tokens_decoder", {}).items()
                                              if getattr(t, "special", False)}
        keep = {tok.convert_tokens_to_ids(m) for m in self.dialect.markers}
        return frozenset(special - keep)

    @functools.cached_property
    def native_tools(self) -> bool:
        """True when the chat template renders tool schemas itself (`tools=`); otherwise the tools are known
        to the model only from the Env's system message, which describes them in text either way."""
        return template_takes_tools(getattr(self.tokenizer, "chat_template", None))

    def render(self, conversation: Sequence[Message], add_generation_prompt: bool = True,
               tools: Sequence[dict[str, Any]] | None = None) -> str:
        """The conversation as text through the tokenizer's chat template, contents defused; `tools` (OpenAI
        tool specs) are passed to a template that takes them. A template that cannot render the conversation
        (one that refuses tool messages, say) is a UserError naming the model and the fix."""
        msgs = message_dicts(conversation, self.dialect)
        for m in msgs:  # the model's turns keep the markers it sampled, rlvr's system prompt those it shows
            keep = self.dialect.markers if m["role"] in TRUSTED else ()
            m["content"] = self._defuse(m.get("content") or "", keep)
        return self.render_dicts(msgs, add_generation_prompt, tools)

    def render_dicts(self, msgs: list[dict[str, Any]], add_generation_prompt: bool = True,
                     tools: Sequence[dict[str, Any]] | None = None) -> str:
        """Chat-template messages (already defused) as text; see `render`."""
        from jinja2 import TemplateError

        kw: dict[str, Any] = {"tools": list(tools)} if tools and self.native_tools else {}
        try:
            return self.tokenizer.apply_chat_template(msgs, tokenize=False,
                                                      add_generation_prompt=add_generation_prompt,
                                                      **kw)
        except (TemplateError, TypeError, KeyError, ValueError) as exc:
            role = "tool" if any(m["role"] == "tool" for m in msgs) else msgs[-1]["role"] if msgs else "empty"
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UserError(f"its chat template cannot render a conversation with {role} messages ({detail})",
                            file=getattr(self, "name", None) or "the model", field="policy.chat_template",
                            fix='set policy.chat_template = "plain", or the path of a Jinja template '
                                'that renders system, user, assistant and tool messages') from None

    def template_turn(self, conversation: Sequence[Message], content: str, calls: Sequence[ToolCall]
                      ) -> tuple[str, str | None] | None:
        """(text, end token) of an assistant turn with `calls` as the chat template writes it after the
        generation prompt (the family's canonical form, which gold trajectories teach), the end token the
        template closes it with left out of the text unless the dialect reads it (None: none); None where the
        template does not write this family's calls, writes the turn other than as a continuation of the
        generation prompt, or writes calls that do not read back as `calls`."""
        template = getattr(self.tokenizer, "chat_template", None)
        if not isinstance(template, str) or not self.dialect.detect(template):
            return None
        msgs = message_dicts(conversation, self.dialect)
        try:
            prompt = self.render_dicts(msgs, True)
            full = self.render_dicts([*msgs, self.dialect.structured(content, list(calls))], False)
        except UserError:
            return None
        if not full.startswith(prompt):
            return None
        text, ends = full[len(prompt):], end_texts(self.tokenizer, frozenset(getattr(self, "eos_ids", ())))
        hits = sorted((text.index(e), e) for e in ends if e in text)
        end = hits[0][1] if hits else None
        if end is not None:
            kept = end in self.dialect.markers
            text = text[:hits[0][0] + (len(end) if kept else 0)]
            end = None if kept else end
        back = self.dialect.parse(text)
        same = [(c.name, c.arguments) for c in back.calls] == [(c.name, c.arguments) for c in calls]
        if not same or back.errors:
            return None
        return text, end

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (special-token markers in it become their single tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def decode_turn(self, ids: Sequence[int]) -> str:
        """A generated turn as text: special tokens left out, except the dialect's markers, which the Env
        parses (Mistral's `[TOOL_CALLS]`, harmony's channels, Llama's `<|python_tag|>`)."""
        drop = self._dropped_ids
        return self.tokenizer.decode([i for i in ids if i not in drop], skip_special_tokens=False)

    def prepare(self, conversations: Sequence[list[Message]], params: SamplingParams,
                prompt_token_ids: Sequence[list[int] | None] | None) -> tuple[list[list[int]], list[int],
                                                                              list[int],
                                                                                list[Completion], list[int]]:
        """(prompts, seeds, budgets, default results, live indices) of a generation batch.

        A prompt is the given token ids or the rendered conversation; a budget is the conversation's token
        budget cut to what the context still holds; a conversation with no budget left or an empty prompt is
        not live and keeps its default result (empty, finish_reason "length").
        """
        n = len(conversations)
        given = list(prompt_token_ids) if prompt_token_ids is not None else [None] * n
        prompts = [list(g) if g is not None else self.encode(self.render(c)) for c,
                   g in zip(conversations, given)]
        seeds = list(params.seeds) if params.seeds is not None else list(range(n))
        if len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} conversations")
        budgets = [min(params.budget(i), self.max_context - len(p)) for i, p in enumerate(prompts)]
        results = [Completion(text="", prompt_token_ids=p, finish_reason="length") for p in prompts]
        live = [i for i in range(n) if budgets[i] > 0 and prompts[i]]
        return prompts, seeds, budgets, results, live


@dataclass
class TokenStream:
    """ids / loss_mask / logprobs of one episode, and the rendered text they stand for."""

    encoder: ChatEncoder
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    restarts: int = 0
    """How many times the stream was rebuilt from a fresh rendering."""
    tools: list[dict[str, Any]] | None = None
    """The episode's tool specs (the Env's `Observation.tools`), given to a template that renders them."""
    segments: list[dict[str, list[Any]]] = field(default_factory=list)
    """The records the stream started over from, each holding generated tokens: every one is exactly what the
    model saw when it sampled them, so it trains on its own (`rlvr.rollout.episode.split_segments`)."""
    _text: str | None = None
    _eos_texts: tuple[str, ...] = ()

    def prompt(self, messages: Sequence[Message]) -> list[int]:
        """The prompt for the next turn: extend the record with the template text after the last turn."""
        full = self.render(messages)
        if self._text is not None and full.startswith(self._text):
            tail = full[len(self._text):]
            end = next((t for t in self._eos_texts if t and tail.startswith(t)), "")
            tail = tail[len(end):]  # the turn's end was generated (whichever end token) and is in the record
            self._append(self.encoder.encode(tail) if tail else [], 0, None)
        else:
            self.restart(full)
        self._text = full
        return list(self.ids)

    def restart(self, rendered: str) -> None:
        """Replace the record by a fresh rendering (generated tokens in it lose their loss mask there); the
        old record, when it holds generated tokens, is kept as a segment that trains on its own."""
        if self.ids:
            self.restarts += 1
            if any(self.mask):
                self.segments.append({"token_ids": list(self.ids), "loss_mask": list(self.mask),
                                      "logprobs": list(self.logprobs)})
        self.ids = self.encoder.encode(rendered)
        self.mask = [0] * len(self.ids)
        self.logprobs = [0.0] * len(self.ids)
        self._text = rendered

    def add_completion(self, comp: Completion, eos_ids: frozenset[int],
                       eos_text: str | Sequence[str]) -> None:
        """Append the sampled tokens (loss_mask 1, their behaviour log-probs). `eos_text`: the text of the end
        tokens (one, or all of a family's: Llama ends a call with `<|eom_id|>` where its template writes
        `<|eot_id|>`, GLM with `<|observation|>`), which the template's text after the turn starts with."""
        self._append(list(comp.token_ids), 1, list(comp.logprobs))
        ended = bool(comp.token_ids) and comp.token_ids[-1] in eos_ids
        texts = (eos_text,) if isinstance(eos_text, str) else tuple(sorted(eos_text, key=len, reverse=True))
        # a dialect that reads its end token (harmony's <|call|>) has it in the turn's text already
        self._eos_texts = texts if ended and not any(t and comp.text.endswith(t) for t in texts) else ()
        self._text = (self._text or "") + comp.text

    def _append(self, ids: list[int], m: int, lps: list[float] | None) -> None:
        if lps is not None and len(lps) != len(ids):
            raise ValueError(f"{len(lps)} log-probs for {len(ids)} tokens")
        self.ids.extend(ids)
        self.mask.extend([m] * len(ids))
        self.logprobs.extend(lps if lps is not None else [0.0] * len(ids))

    def copy(self) -> TokenStream:
        """An independent copy (to try a turn's prompt before committing to it)."""
        return TokenStream(self.encoder, list(self.ids), list(self.mask), list(self.logprobs), self.restarts,
                           self.tools, [dict(s) for s in self.segments], self._text, self._eos_texts)

    def render(self, messages: Sequence[Message]) -> str:
        """A fresh rendering of `messages` with the generation prompt (and the episode's tools, if any)."""
        if self.tools:
            render = self.encoder.render
            return render(messages, add_generation_prompt=True, tools=self.tools)  # type: ignore[call-arg]
        return self.encoder.render(messages, add_generation_prompt=True)

    def count(self, messages: Sequence[Message]) -> int:
        """Tokens of a fresh rendering of `messages` with the generation prompt."""
        return len(self.encoder.encode(self.render(messages)))
