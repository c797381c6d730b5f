"""One episode's calls through the gateway: its key, budgets and token record (`AgentSession`), and what goes
into the Episode when it ends (`fill`).

The record is kept in segments (`rlvr.rollout.gateway.core` says when one starts). Beside the tokens, each
call is recorded (`metadata["calls"]`): the API it came through, where its sampled tokens sit in the record,
the sampling it asked for, whether a grammar constrained it, and the tool calls the model wrote. The episode's
tool calls are those the model wrote (`metadata["tool_names"]`), whatever form the agent sends the results
back in. """
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.messages import Message, ToolCall
from rlvr.rollout.core.tokens import TokenStream
from rlvr.rollout.episode import Episode


@dataclass
class Segment:
    """One closed segment of an episode's token record."""

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    messages: list[Message]


@dataclass
class SentTurn:
    """What the caller was sent for one turn, and the raw text the model wrote for it."""

    raw: str
    content: str
    calls: list[ToolCall]


@dataclass
class AgentSession:
    """One episode's calls: its key, budgets, token record and what the agent was told."""

    key: str
    episode_id: str
    seed: int = 0
    max_turns: int | None = None
    """Calls allowed; the next one is refused and the agent stopped (the episode is truncated)."""
    max_tokens: int | None = None
    """Tokens the model may generate over the episode."""
    calls: int = 0
    generated: int = 0
    segments: list[Segment] = field(default_factory=list)
    stream: TokenStream | None = None
    mode: str = ""
    messages: list[Message] = field(default_factory=list)
    """The current segment's conversation, the last completion included."""
    versions: list[int] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    turns: dict[str, SentTurn] = field(default_factory=dict)
    """First call id (or `content:TEXT`) -> the turn sent with it."""
    log: list[dict[str, Any]] = field(default_factory=list)
    """One record per call (`metadata["calls"]`)."""
    tool_names: list[str] = field(default_factory=list)
    """The tools the model called, in order, over the whole episode."""
    truncated_by: str | None = None
    """The budget that ran out (turns, tokens, context, wall), when one did."""
    refused: str | None = None
    """What the gateway answered the call it refused for a budget (the eval names it among its reasons)."""
    stopped: threading.Event = field(default_factory=threading.Event)
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self, why: str, refused: str | None = None) -> None:
        """A budget ran out: the agent is stopped (its launcher polls `/rlvr/stop`) and the episode
        truncated; `refused`: the message of the call refused for it."""
        self.truncated_by = self.truncated_by or why
        self.refused = self.refused or refused
        self.stopped.set()

    def sent(self, turn: SentTurn) -> None:
        """Remember a turn sent to the caller, to find its raw text when the caller sends it back."""
        key = turn.calls[0].id if turn.calls else "content:" + turn.content
        self.turns[key] = turn

    def raw_of(self, content: str, calls: list[ToolCall]) -> str | None:
        """The raw text the model wrote for an assistant turn the caller sent back unchanged, else None."""
        hit = self.turns.get(calls[0].id if calls else "content:" + content)
        if hit is None or (content or "") != (hit.content or ""):
            return None
        same = [(c.id, c.name, c.arguments) for c in calls] == [(c.id, c.name,
                                                                 c.arguments) for c in hit.calls]
        return hit.raw if same else None

    def record(self) -> list[Segment]:
        """Every segment, the current one last."""
        out = list(self.segments)
        if self.stream is not None:
            s = self.stream
            out.append(Segment(list(s.ids), list(s.mask), list(s.logprobs), list(self.messages)))
        return out

    def fill(self, ep: Episode) -> Episode:
        """Put the calls' record into `ep`: the last segment's tokens and messages, earlier segments in
        `metadata["segments"]`, turns, generated tokens, each call's record, the model's tool calls, the
        oldest policy version that sampled a turn."""
        segs = self.record()
        if segs:
            last = segs[-1]
            ep.token_ids, ep.loss_mask, ep.logprobs, ep.messages = (last.token_ids, last.loss_mask,
                                                                    last.logprobs, last.messages)
        ep.metadata["segments"] = [{"token_ids": s.token_ids, "loss_mask": s.loss_mask,
                                    "logprobs": s.logprobs,
                                    "messages": [m.model_dump(exclude_defaults=True) for m in s.messages]}
                                   for s in segs[:-1]]
        ep.metadata["finish_reasons"] = list(self.finish_reasons)
        if self.refused is not None:
            ep.metadata["refused"] = self.refused
        ep.metadata["calls"] = [dict(c) for c in self.log]
        ep.metadata["tool_calls"], ep.metadata["tool_names"] = len(self.tool_names), list(self.tool_names)
        ep.num_turns, ep.num_generated_tokens = self.calls, self.generated
        if self.versions:
            ep.policy_version = min(self.versions)
            if len(set(self.versions)) > 1:
                ep.metadata["policy_versions"] = list(self.versions)
        return ep
