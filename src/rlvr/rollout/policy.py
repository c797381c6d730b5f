"""The Policy protocol: generate one completion for each conversation of a batch, with tokens and log-probs.

This module holds the contract and its records (SamplingParams, Completion) only; the backends that implement
it import it, and `rlvr.rollout.policies.backends` (`make_policy`) builds one of them from a SPEC string or a
PolicyConfig.

Log-probs: `Completion.logprobs[i]` is the behaviour log-probability of `token_ids[i]` under the distribution
the token was actually sampled from: the model's logits divided by the temperature, restricted to the top-p
nucleus and renormalised. With temperature 0 (greedy) the token is the argmax and its log-prob is taken from
the untempered distribution (temperature 1, no top-p), which is what a trainer recomputes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rlvr.envs.messages import Message, ToolCall

if TYPE_CHECKING:
    from rlvr.config import PolicyConfig


TokenSink = Callable[[int, int, float, "dict[int, float] | None"], None]
"""`on_token(conversation index, token id, its log-prob, its top alternatives or None)`."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one model turn."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus mass kept before sampling."""
    max_new_tokens: int = 256
    """Tokens generated at most in this turn."""
    seeds: tuple[int, ...] | None = None
    """One seed per conversation: the same seed and prompt give the same tokens, whatever the batch."""
    stop: tuple[str, ...] = ()
    """Extra stop strings (the eos/end token always stops)."""
    budgets: tuple[int, ...] | None = None
    """Per-conversation caps on new tokens (each episode's remaining budget); max_new_tokens caps them all."""
    constraints: tuple[str | None, ...] | None = None
    """Per-conversation grammar the turn must match (a Lark grammar in llguidance's syntax, JSON schemas
    inline as `%json {...}`; `rlvr.rollout.policies.constrain`), None: free. Disallowed tokens are masked
    before each token is sampled, so a constrained turn's log-probs are those of the masked distribution."""
    top_logprobs: int = 0
    """Most likely alternatives returned per generated token (`Completion.top_logprobs`), from the
    distribution the token was sampled from."""
    on_token: TokenSink | None = None
    """Called with each token as it is sampled (streaming), on the generating thread."""

    @classmethod
    def from_config(cls, cfg: PolicyConfig) -> SamplingParams:
        """Temperature, top-p and tokens per turn from the `[policy]` config section."""
        return cls(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)

    def budget(self, i: int) -> int:
        """New tokens allowed for conversation i."""
        return self.max_new_tokens if self.budgets is None else min(self.max_new_tokens, self.budgets[i])


@dataclass
class Completion:
    """One generated model turn."""

    text: str
    """Decoded text of the generated tokens, special tokens removed."""
    token_ids: list[int] = field(default_factory=list)
    """Generated token ids, the final eos/end token included when the turn stopped on it."""
    logprobs: list[float] = field(default_factory=list)
    """Behaviour log-prob of each generated token (see the module docstring); same length as token_ids."""
    prompt_token_ids: list[int] = field(default_factory=list)
    """The prompt exactly as the model saw it (empty when the backend cannot tell)."""
    finish_reason: str = "stop"
    """stop (eos/end or a stop string), length (max_new_tokens), error (an infra fault of the backend)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Calls returned natively by the backend (OpenAI `tool_calls`); text-format calls are parsed by the
    env."""
    error: str | None = None
    """For finish_reason "error": what went wrong (the env loop retries, then masks the episode)."""
    call_errors: list[str] = field(default_factory=list)
    """Why native tool calls the backend returned could not be used (reported to the model by the env)."""
    policy_version: int | None = None
    """Version of the weights that sampled this turn, when the backend generates from its own copy of them
    (vllm; hf in asynchronous mode); None: the policy's `version`."""
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    """Per generated token, its most likely alternatives and their log-probs (when `top_logprobs` was
    asked)."""

    @property
    def num_tokens(self) -> int:
        """Generated tokens: the ids, else the log-probs the server sent, else about four characters a
        token."""
        return len(self.token_ids) or len(self.logprobs) or -(-len(self.text) // 4)


Conversation = list[Message]


@runtime_checkable
class Policy(Protocol):
    """Anything that can continue a batch of conversations."""

    version: int
    """Version of the weights (a trainer increments it after each update)."""

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        """One completion per conversation. `prompt_token_ids`, when a backend supports it, gives the exact
        prompt tokens to continue (the env loop builds them incrementally so training sees what was
        sampled)."""
        ...
