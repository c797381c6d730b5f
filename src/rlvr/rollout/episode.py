"""Episode records: everything training and analysis need about one attempt at one task.

The conversation records an Episode holds (Message, ToolCall) live in `rlvr.envs.messages`, beside their
lowest user, the Env.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlvr.envs.messages import Message
from rlvr.tasks.spec import FinalState
from rlvr.verify.verdict import Verdict

EPISODE_SCHEMA_VERSION = 1


class Episode(BaseModel):
    """One attempt at one task by one policy version.

    Token layout for training: `token_ids` is the whole conversation as the model saw it, `loss_mask` marks
    the tokens the model generated (1) versus prompt and tool output (0), and `logprobs` holds the behaviour
    policy's log-probability of each generated token (0.0 elsewhere). All three have the same length.
    """

    model_config = ConfigDict(extra="forbid")

    episode_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    run_id: str = ""
    step: int = 0
    """Training step (or eval round) that produced it."""
    task_id: str
    domain: str
    group_id: str = ""
    """Episodes of the same task sampled together for a GRPO group share this id."""
    sample_index: int = 0
    """Index within the group."""
    seed: int = 0
    """Sampling seed of this episode."""
    policy_version: int = 0
    """Version of the weights that generated it (increments with each policy update)."""
    messages: list[Message] = Field(default_factory=list)
    token_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    final_state: FinalState = Field(default_factory=FinalState)
    verdict: Verdict | None = None
    reward: float = 0.0
    status: Literal["done", "truncated", "infra_error", "pending"] = "pending"
    """done: terminated by submit/answer; truncated: a budget ran out; infra_error: masked from training."""
    truncated_by: str | None = None
    """Which budget ran out: turns, tokens, wall, context."""
    context_elided: bool = False
    """True when older tool output was elided to fit the context."""
    num_turns: int = 0
    num_generated_tokens: int = 0
    infra_retries: int = 0
    node: str | None = None
    """The Ray node its sandbox work ran on (its workspace's, else its verification's; the last one when a
    node was lost mid-episode), as `rlvr.scale.cluster.short` names it; None: on this machine."""
    lost_nodes: list[str] = Field(default_factory=list)
    """Nodes that held its workspace and were lost (or drained) under it, in order: what those nodes cost."""
    """How many times an infra fault was retried within this episode."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds per phase: generate, tools, verify, total."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    schema_version: int = EPISODE_SCHEMA_VERSION

    @property
    def masked(self) -> bool:
        """Infra faults are masked from training, never scored 0."""
        return self.status == "infra_error" or (self.verdict is not None
                                                and self.verdict.infra_error is not None)

    @property
    def passed(self) -> bool:
        return bool(self.verdict and self.verdict.passed)


TOKEN_BUDGET = "token_budget"
"""`Episode.metadata` key: the tokens the episode could generate over all its turns, as its runner budgeted
them (the overlong penalty ramps towards it, rlvr.train.truncation)."""
TRUNCATION_REASONS = ("turns", "tokens", "wall", "context")
"""The budgets that cut an episode (`Episode.truncated_by`)."""


def split_segments(episodes: Sequence[Episode]) -> list[Episode]:
    """One training record per segment of each episode (the same episode_id, so an advantage keyed by episode
    reaches each of them). An episode whose token record had to start over (older output elided to fit the
    context, a template that rewrote earlier text; or a gateway caller that edited its history) keeps its
    earlier records in `metadata["segments"]`, each exactly what the model saw when it sampled its tokens:
    `rlvr.train.update.samples_from(split_segments(eps), advantages)` trains every one on its own tokens."""
    out: list[Episode] = []
    for ep in episodes:
        for seg in ep.metadata.get("segments") or []:
            out.append(ep.model_copy(update={"token_ids": seg["token_ids"], "loss_mask": seg["loss_mask"],
                                             "logprobs": seg["logprobs"]}))
        out.append(ep)
    return out


def tool_names(ep: Episode) -> list[str]:
    """The tools the model called, in order. For an agent's episode, the calls the gateway read out of what
    the model wrote (`metadata["tool_names"]`), whatever form the agent sent the results back in (tool
    messages, tool_result blocks, function_call_output items, or plain user messages); for the env loop's, its
    tool messages, one per call it ran."""
    names = ep.metadata.get("tool_names")
    if isinstance(names, list):
        return [str(n) for n in names]
    return [m.name or "" for m in ep.messages if m.role == "tool"]


def mask_calls(ep: Episode, drop: Callable[[dict[str, Any]], bool]) -> Episode:
    """A copy of a gateway episode with the sampled tokens of the calls `drop` picks masked out (loss_mask 0)
    in whichever segment holds them: e.g. `mask_calls(ep, lambda c: c["constrained"] or not
    c["run_sampling"])` keeps out of training the turns whose behaviour log-probs are not the run's policy's
    (docs/INTEGRATIONS.md, "What the record says about each call")."""
    segs = [dict(s, loss_mask=list(s["loss_mask"])) for s in ep.metadata.get("segments") or []]
    last = list(ep.loss_mask)
    for call in ep.metadata.get("calls") or []:
        if not drop(call):
            continue
        mask = segs[call["segment"]]["loss_mask"] if call["segment"] < len(segs) else last
        mask[call["start"]:call["end"]] = [0] * (call["end"] - call["start"])
    return ep.model_copy(update={"loss_mask": last, "metadata": {**ep.metadata, "segments": segs}})
