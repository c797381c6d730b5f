"""Constrained decoding for the `hf` backend: a turn sampled under a grammar, disallowed tokens masked before
each token is drawn.

A constraint is a Lark grammar in llguidance's syntax (JSON schemas inline as `%json {...}`), the form the
gateway builds for `response_format` and `tool_choice` (`rlvr.rollout.gateway.grammar`) and the one vLLM's
`guidance` structured-output backend takes, so both backends constrain with the same engine. llguidance
(Microsoft's guidance-ai, Rust, no Python dependencies) computes each row's mask of allowed tokens from the
tokens it consumed so far; the mask is applied to the row's logits before sampling, so the sampled token and
its behaviour log-prob are those of the masked distribution (docs/INTEGRATIONS.md says what this means for
training and how constrained turns are marked). docs/INTEGRATIONS.md also says why llguidance was chosen over
xgrammar, outlines and lm-format-enforcer. """
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


@functools.lru_cache(maxsize=8)
def _ll_tokenizer(tokenizer: Any, eos: tuple[int, ...]) -> Any:
    import llguidance.hf

    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer), eos_token=list(eos))


class RowConstraints:
    """The grammar matchers of one generation call's constrained rows (by row index of the call)."""

    def __init__(self, tokenizer: Any, eos_ids: frozenset[int], grammars: Sequence[str | None], vocab: int
                 ) -> None:
        import llguidance

        ll = _ll_tokenizer(tokenizer, tuple(sorted(eos_ids)))
        self.vocab = vocab
        self.matchers: dict[int, Any] = {}
        for row, lark in enumerate(grammars):
            if lark is None:
                continue
            m = llguidance.LLMatcher(ll, llguidance.LLMatcher.grammar_from_lark(lark))
            if m.is_error():
                raise ValueError(f"the grammar of row {row} does not compile: {m.get_error()}")
            self.matchers[row] = m

    def __bool__(self) -> bool:
        return bool(self.matchers)

    def allowed(self, row: int) -> torch.Tensor | None:
        """The boolean mask of tokens row `row` may sample next (None: the row is free)."""
        m = self.matchers.get(row)
        if m is None:
            return None
        bits = np.unpackbits(np.frombuffer(m.compute_bitmask(), dtype=np.uint8), bitorder="little")
        return torch.from_numpy(bits[:self.vocab].astype(bool))

    def mask(self, logits: torch.Tensor, rows: Sequence[int], live: Sequence[bool]) -> None:
        """Set to -inf, in place, the logits of every token the grammar forbids, for each live constrained row
        (`rows[j]`: the call's row index of batch row j)."""
        for j, (row, on) in enumerate(zip(rows, live)):
            allowed = self.allowed(row) if on else None
            if allowed is not None:
                width = min(logits.shape[-1], allowed.shape[0])
                logits[j, :width].masked_fill_(~allowed[:width].to(logits.device), float("-inf"))
                logits[j, width:] = float("-inf")

    def advance(self, rows: Sequence[int], tokens: Sequence[int], live: Sequence[bool]) -> None:
        """Feed each live constrained row the token it sampled."""
        for row, tok, on in zip(rows, tokens, live):
            m = self.matchers.get(row)
            if on and m is not None and not m.is_stopped() and not m.consume_token(int(tok)):
                raise RuntimeError(f"row {row} sampled token {tok}, which its grammar forbids: "
                                   f"{m.get_error()}")
