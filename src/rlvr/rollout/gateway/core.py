"""The gateway: an OpenAI-compatible endpoint in front of the policy that records every call's tokens for RL.

An agent of any framework trains through its `base_url`. Each episode opens a `AgentSession` with its own API
key; each request's messages are rendered by the policy's own chat template, and the exact prompt token ids,
the sampled token ids, their behaviour log-probs and the policy version go into that session's token record,
built like the env loop's (`rlvr.rollout.core.tokens.TokenStream`: prompts are extended, never
re-tokenized).

Segments: when a call's history is not an extension of the previous call's prompt and completion (the agent
edited, trimmed or summarised its history), the record so far is closed as a segment and a new one starts
from a fresh rendering. Each segment is trained on its own tokens, so no token is ever credited with a
context the model did not see (`AgentSession.fill` puts the last segment in the Episode's token fields and the
earlier ones in `metadata["segments"]`; `rlvr.rollout.episode.split_segments` makes one training record of
each).

Turns the model writes with rlvr's text tool calls (`<tool_call>{...}</tool_call>`) go back as OpenAI
`tool_calls`; when the agent sends such a turn back, the gateway renders the raw text it generated, so the
next prompt extends the record exactly. The HTTP side is `rlvr.rollout.gateway.server`.

Sampling: temperature and top-p are the run's (`sampling`), whatever a request asks, so the behaviour
log-probs are those the trainer recomputes; `max_tokens` and `stop` are honoured within the episode's budgets.
Calls from all sessions are batched into one `generate` call per short window.
"""
from __future__ import annotations

import queue
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.messages import Message
from rlvr.envs.parse import parse_text
from rlvr.errors import UserError
from rlvr.rollout.core.tokens import ChatEncoder, TokenStream
from rlvr.rollout.episode import Episode
from rlvr.rollout.gateway import wire
from rlvr.rollout.gateway.wire import ApiError, Reply, Request
from rlvr.rollout.policy import Completion, Policy, SamplingParams

BATCH_WINDOW_S = 0.002
"""How long the generator waits for other sessions' calls to join a batch."""
STOP_POLL_S = 20.0
"""The longest one `/rlvr/stop` poll waits before answering "not yet"."""


class _Raw:
    """An encoder for /v1/completions: the prompt text is used as it is, no chat template."""

    def __init__(self, encoder: ChatEncoder) -> None:
        self.encoder, self.max_context = encoder, encoder.max_context

    def render(self, conversation: Sequence[Message], add_generation_prompt: bool = True) -> str:
        return conversation[0].content

    def encode(self, text: str) -> list[int]:
        return self.encoder.encode(text)


@dataclass
class Segment:
    """One closed segment of an episode's token record."""

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    messages: list[Message]


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
    turns: dict[str, tuple[str, str | None, list[dict[str, Any]]]] = field(default_factory=dict)
    """First tool-call id (or `content:TEXT`) -> (raw text, content sent, tool_calls sent) of the turns it
    wrote."""
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

    def record(self) -> list[Segment]:
        """Every segment, the current one last."""
        out = list(self.segments)
        if self.stream is not None:
            s = self.stream
            out.append(Segment(list(s.ids), list(s.mask), list(s.logprobs), list(self.messages)))
        return out

    def fill(self, ep: Episode) -> Episode:
        """Put the calls' record into `ep`: the last segment's tokens and messages, earlier segments in
        `metadata["segments"]`, turns, generated tokens, the oldest policy version that sampled a turn."""
        segs = self.record()
        if segs:
            last = segs[-1]
            ep.token_ids, ep.loss_mask, ep.logprobs, ep.messages = (last.token_ids, last.loss_mask,
                                                                    last.logprobs,
                                                                    last.messages)
        ep.metadata["segments"] = [{"token_ids": s.token_ids, "loss_mask": s.loss_mask,
                                    "logprobs": s.logprobs,
                                    "messages": [m.model_dump(exclude_defaults=True) for m in s.messages]}
                                   for s in segs[:-1]]
        ep.metadata["finish_reasons"] = list(self.finish_reasons)
        if self.refused is not None:
            ep.metadata["refused"] = self.refused
        ep.num_turns, ep.num_generated_tokens = self.calls, self.generated
        if self.versions:
            ep.policy_version = min(self.versions)
            if len(set(self.versions)) > 1:
                ep.metadata["policy_versions"] = list(self.versions)
        return ep


@dataclass
class _Call:
    """One call waiting for the generator."""

    prompt: list[int]
    budget: int
    seed: int
    stop: tuple[str, ...]
    done: Future = field(default_factory=Future)


@dataclass
class Response:
    """What the HTTP side sends: a JSON body, or (streaming) a sequence of server-sent events."""

    status: int
    body: dict[str, Any] | None = None
    events: Iterator[dict[str, Any]] | None = None


class Gateway:
    """Sessions, routes and batched generation over one policy (an hf or vllm backend with a tokenizer)."""

    def __init__(self, policy: Policy, sampling: SamplingParams | None = None, *,
                 model_name: str | None = None,
                 batch_window_s: float = BATCH_WINDOW_S, max_batch: int = 64) -> None:
        if not isinstance(policy, ChatEncoder) or not hasattr(policy, "eos_ids"):
            raise UserError(f"the gateway needs a policy that renders and tokenizes ({type(policy).__name__} "
                            "does not)", field="policy.backend", fix="use an hf or vllm policy")
        self.policy = policy
        self.encoder: ChatEncoder = policy
        self.sampling = sampling or SamplingParams()
        self.model_name = model_name or str(getattr(policy, "name", "rlvr-policy"))
        tok = getattr(policy, "tokenizer", None)
        self.eos: tuple[frozenset[int], str] = (frozenset(policy.eos_ids),  # type: ignore[attr-defined]
                                                (tok.eos_token or "") if tok is not None else "")
        self.native_tools = bool(getattr(policy, "native_tools", False))
        self.sessions: dict[str, AgentSession] = {}
        self._lock = threading.Lock()
        self._window, self._max_batch = batch_window_s, max_batch
        self._queue: queue.Queue[_Call | None] = queue.Queue()
        self._worker = threading.Thread(target=self._generate_loop, name="rlvr-gateway-generate", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------------------------------ sessions
    def open_session(self, episode_id: str = "", *, seed: int = 0, max_turns: int | None = None,
                     max_tokens: int | None = None) -> AgentSession:
        """A new session with a fresh key (hand the key to that episode's agent only)."""
        s = AgentSession(key="sk-rlvr-" + secrets.token_urlsafe(24), episode_id=episode_id, seed=seed,
                    max_turns=max_turns, max_tokens=max_tokens)
        with self._lock:
            self.sessions[s.key] = s
        return s

    def close_session(self, key: str) -> AgentSession | None:
        """Revoke a key: later calls with it are refused (401); the session's record stays with the caller."""
        with self._lock:
            s = self.sessions.pop(key, None)
        if s is not None:
            s.closed = True
            s.stopped.set()
        return s

    def close(self) -> None:
        for key in list(self.sessions):
            self.close_session(key)
        self._queue.put(None)

    def authorize(self, headers: dict[str, str], only: str | None = None) -> AgentSession:
        auth = headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("api-key", "").strip()
        s = self.sessions.get(key) if key and (only is None or key == only) else None
        if s is None:
            shown = (key[:8] + "..." + key[-4:]) if len(key) > 12 else "(none)" if not key else "..."
            raise ApiError(401, f"Incorrect API key provided: {shown}. Each episode has its own key, in "
                           "OPENAI_API_KEY; keys end with their episode.", code="invalid_api_key")
        return s

    # --------------------------------------------------------------------------------------------- routes
    def handle(self, method: str, path: str, headers: dict[str, str], body: Any, *, only: str | None = None
               ) -> Response:
        """One request: `body` is the decoded JSON (None for GET); `only` limits the listener to one key."""
        try:
            path = path.split("?", 1)[0].rstrip("/")
            routes = {("POST", "/v1/chat/completions"): self._chat,
                      ("POST", "/v1/completions"): self._complete,
                      ("GET", "/v1/models"): self._models, ("GET", "/rlvr/stop"): self._stop}
            fn = routes.get((method, path))
            if fn is None:
                known = sorted({p for _, p in routes})
                if any(p == path for _, p in routes):
                    raise ApiError(405, f"{method} is not allowed on {path}")
                raise ApiError(404, f"unknown path {path}; the gateway serves {', '.join(known)}",
                               code="unknown_url")
            session = self.authorize({k.lower(): v for k, v in headers.items()}, only)
            return fn(session, body)
        except ApiError as exc:
            return Response(exc.status, exc.body())

    def _models(self, session: AgentSession, body: Any) -> Response:
        return Response(200, wire.models_response(self.model_name))

    def _stop(self, session: AgentSession, body: Any) -> Response:
        session.stopped.wait(STOP_POLL_S)
        return Response(200, {"stop": session.truncated_by or ("closed" if session.closed else None)})

    def _chat(self, session: AgentSession, body: Any) -> Response:
        req = wire.chat_request(body)
        with session.lock:
            msgs = [wire.to_message(d, self._raw(session, d)) for d in req.messages]
            tools = req.tools if req.tool_choice != "none" else []
            if tools and not self.native_tools:
                msgs = _with_system(msgs, wire.tools_text(tools, req.tool_choice))
            stream = TokenStream(self.encoder, tools=list(tools) if self.native_tools and tools else None)
            comp, prompt = self._call(session, req, msgs, stream, "chat")
            calls, _ = parse_text(comp.text, id_prefix=f"call_{session.calls}_{secrets.token_hex(3)}") \
                if tools else ([], [])
            content = wire.visible_content(comp.text) if calls else comp.text
            sent_calls = wire.openai_calls(calls)
            sent_content = content or None if calls else content
            session.turns[sent_calls[0]["id"] if sent_calls else "content:" + content] = (
                comp.text, sent_content, sent_calls)
        reason = "tool_calls" if calls else "length" if comp.finish_reason == "length" else "stop"
        turn = Reply(id="chatcmpl-" + secrets.token_hex(12), model=self.model_name, text=comp.text,
                    content=sent_content, tool_calls=sent_calls, finish_reason=reason,
                    prompt_tokens=len(prompt), completion_tokens=len(comp.token_ids))
        if req.stream:
            return Response(200, events=wire.chat_chunks(turn, req.include_usage))
        return Response(200, wire.chat_response(turn))

    def _complete(self, session: AgentSession, body: Any) -> Response:
        req = wire.completion_request(body)
        with session.lock:
            stream = TokenStream(_Raw(self.encoder))  # type: ignore[arg-type]
            comp, prompt = self._call(session, req, [Message(role="user", content=req.prompt or "")], stream,
                                      "raw")
        turn = Reply(id="cmpl-" + secrets.token_hex(12), model=self.model_name, text=comp.text,
                     content=comp.text,
                    tool_calls=[], finish_reason="length" if comp.finish_reason == "length" else "stop",
                    prompt_tokens=len(prompt), completion_tokens=len(comp.token_ids))
        if req.stream:
            return Response(200, events=wire.completion_chunks(turn, req.include_usage))
        return Response(200, wire.completion_response(turn))

    def _raw(self, session: AgentSession, d: dict[str, Any]) -> str | None:
        """The raw text of an assistant turn the gateway wrote, when the agent sent it back unchanged."""
        if d["role"] != "assistant":
            return None
        calls = d["tool_calls"]
        key = str(calls[0].get("id")) if calls else "content:" + d["content"]
        hit = session.turns.get(key)
        if hit is None:
            return None
        raw, content, sent = hit
        same_calls = [(c.get("id"), c["function"].get("name"), c["function"].get("arguments"))
                      for c in calls] == [
            (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in sent]
        return raw if same_calls and (d["content"] or None) == (content or None) else None

    # ------------------------------------------------------------------------------------------- one call
    def _call(self, session: AgentSession, req: Request, msgs: list[Message], fresh: TokenStream, mode: str
              ) -> tuple[Completion, list[int]]:
        """Budgets, the prompt (extending the segment, or a new one), generation and the record of one
        call."""
        if session.closed:
            raise ApiError(401, "this episode has ended; its key is no longer valid", code="invalid_api_key")
        if session.max_turns is not None and session.calls >= session.max_turns:
            raise _refuse(session, "turns", f"the episode's turn budget ({session.max_turns} calls) is spent")
        left = None if session.max_tokens is None else session.max_tokens - session.generated
        if left is not None and left <= 0:
            raise _refuse(session, "tokens",
                          f"the episode's token budget ({session.max_tokens} tokens) is spent")
        budget = min(x for x in (req.max_tokens, self.sampling.max_new_tokens, left) if x is not None)
        stream, new_segment = self._extend(session, msgs, fresh, mode)
        prompt = list(stream.ids)
        room = self.encoder.max_context - len(prompt)
        if room <= 0:
            message = (f"this model's maximum context length is {self.encoder.max_context} tokens; the "
                       f"messages take {len(prompt)}")
            session.stop("context", message)
            raise ApiError(400, message, param="messages", code="context_length_exceeded")
        seed = (req.seed if req.seed is not None else session.seed) + 1_000_003 * session.calls
        comp = self._submit(session, prompt, min(budget, room), seed, req.stop)
        if new_segment and session.stream is not None:
            session.segments.append(Segment(list(session.stream.ids), list(session.stream.mask),
                                            list(session.stream.logprobs), list(session.messages)))
        stream.add_completion(comp, *self.eos)
        session.stream, session.mode = stream, mode
        session.messages = [*msgs, Message(role="assistant", content=comp.text)]
        session.calls += 1
        session.generated += len(comp.token_ids)
        session.finish_reasons.append(comp.finish_reason)
        session.versions.append(comp.policy_version if comp.policy_version is not None
                                else int(getattr(self.policy, "generation_version", self.policy.version)))
        if left is not None and session.generated >= session.max_tokens:  # type: ignore[operator]
            session.stop("tokens")
        return comp, prompt

    def _extend(self, session: AgentSession, msgs: list[Message], fresh: TokenStream, mode: str
                ) -> tuple[TokenStream, bool]:
        """(the stream whose ids are this call's prompt, whether it starts a new segment)."""
        cur = session.stream
        if cur is not None and session.mode == mode and cur.tools == fresh.tools:
            trial = cur.copy()
            trial.prompt(msgs)
            if trial.restarts == cur.restarts:
                return trial, False
        fresh.prompt(msgs)
        return fresh, cur is not None

    # ----------------------------------------------------------------------------------------- generation
    def _submit(self, session: AgentSession, prompt: list[int], budget: int, seed: int, stop: tuple[str, ...]
                ) -> Completion:
        call = _Call(prompt, budget, seed, stop)
        self._queue.put(call)
        comp: Completion = call.done.result()  # the generator always resolves it
        if comp.finish_reason == "error":
            raise ApiError(500, f"the policy failed to generate: {comp.error}", type="server_error")
        return comp

    def _generate_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            deadline = time.perf_counter() + self._window
            while len(batch) < self._max_batch:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.perf_counter()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            for stop in {c.stop for c in batch}:  # one generate call per set of stop strings
                self._generate([c for c in batch if c.stop == stop], stop)

    def _generate(self, batch: list[_Call], stop: tuple[str, ...]) -> None:
        sp = self.sampling
        params = SamplingParams(temperature=sp.temperature, top_p=sp.top_p,
                                max_new_tokens=max(c.budget for c in batch),
                                stop=tuple(sp.stop) + stop, seeds=tuple(c.seed for c in batch),
                                budgets=tuple(c.budget for c in batch))
        try:
            comps = self.policy.generate([[Message(role="user", content="")] for _ in batch], params,
                                         prompt_token_ids=[c.prompt for c in batch])
            if len(comps) != len(batch):
                raise RuntimeError(f"{len(comps)} completions for {len(batch)} prompts")
        except Exception as exc:  # noqa: BLE001 (a backend fault: these calls fail with a server error)
            comps = [Completion(text="", finish_reason="error", error=f"{type(exc).__name__}: {exc}")
                     for _ in batch]
        for call, comp in zip(batch, comps):
            call.done.set_result(comp)


def bad_budget(message: str) -> ApiError:
    return ApiError(400, message + "; the episode is over", code="budget_exhausted")


def _refuse(session: AgentSession, budget: str, message: str) -> ApiError:
    """The error refusing a call for a spent `budget`, the agent stopped and the refusal recorded."""
    session.stop(budget, message)
    return bad_budget(message)


def _with_system(msgs: list[Message], text: str) -> list[Message]:
    """`text` appended to the leading system message (or as one, first)."""
    if msgs and msgs[0].role == "system":
        return [msgs[0].model_copy(update={"content": msgs[0].content + "\n\n" + text}), *msgs[1:]]
    return [Message(role="system", content=text), *msgs]
