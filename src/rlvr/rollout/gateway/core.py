"""The gateway: an endpoint in front of the policy that speaks what agent harnesses speak (OpenAI chat
completions, Anthropic Messages, OpenAI Responses) and records every call's tokens for RL.

An agent of any framework trains through its base URL. Each episode opens an `AgentSession` with its own API
key; each request's messages are rendered by the policy's own chat template, and the exact prompt token ids,
the sampled token ids, their behaviour log-probs and the policy version go into that session's token record,
built like the env loop's (`rlvr.rollout.core.tokens.TokenStream`: prompts are extended, never re-tokenized).
The three APIs share this one path: a wire module (`wire`, `anthropic`, `responses`) turns a body into a
`Call` and a `Turn` back into its response (`rlvr.rollout.gateway.convert`); `Gateway.handle` is the one
sans-IO entry, and `rlvr.rollout.gateway.server` the HTTP side.

Segments: when a call's history is not an extension of the previous call's prompt and completion (the agent
edited, trimmed or summarised its history), the record so far is closed as a segment and a new one starts
from a fresh rendering. Each segment is trained on its own tokens, so no token is ever credited with a
context the model did not see (`AgentSession.fill`; `rlvr.rollout.episode.split_segments`).

Turns the model writes with tool calls go back as the API's tool calls (read by `TurnReader.parse`); when the
agent sends such a turn back unchanged, the gateway renders the raw text it generated, so the next prompt
extends the record exactly.

Sampling: a request's temperature, top-p, seed, stop strings and token cap are honoured (capped by the run's
`max_new_tokens` and the episode's budgets); `response_format` and a forced `tool_choice` constrain the turn
by a grammar (`rlvr.rollout.gateway.grammar`). Each call's record says how it was sampled, so a run can mask
the turns whose log-probs are not the run's (`metadata["calls"]`, docs/INTEGRATIONS.md). With `stream`, tokens
go out as they are sampled. Calls from all sessions are batched into one `generate` call per short window. """
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
from rlvr.errors import UserError
from rlvr.rollout.core.tokens import ChatEncoder, TokenStream, end_texts
from rlvr.rollout.gateway import anthropic, responses, wire
from rlvr.rollout.gateway.convert import (
    Api,
    ApiError,
    Call,
    Head,
    TextStream,
    Turn,
    TurnReader,
    info,
    named,
    openai_error,
    reader_of,
    tools_text,
    with_system,
)
from rlvr.rollout.gateway.grammar import constraint
from rlvr.rollout.gateway.session import AgentSession, Segment, SentTurn
from rlvr.rollout.policy import Completion, Policy, SamplingParams

BATCH_WINDOW_S = 0.002
"""How long the generator waits for other sessions' calls to join a batch."""
STOP_POLL_S = 20.0
"""The longest one `/rlvr/stop` poll waits before answering "not yet"."""

ROUTES: dict[tuple[str, str], Api] = {
    ("POST", "/v1/chat/completions"): wire.CHAT, ("POST", "/v1/completions"): wire.COMPLETIONS,
    ("POST", "/v1/messages"): anthropic.MESSAGES, ("POST", "/v1/responses"): responses.RESPONSES}
"""The generating routes and their wire formats."""


class _Raw:
    """An encoder for /v1/completions: the prompt text is used as it is, no chat template."""

    def __init__(self, encoder: ChatEncoder) -> None:
        self.encoder, self.max_context = encoder, encoder.max_context

    def render(self, conversation: Sequence[Message], add_generation_prompt: bool = True) -> str:
        return conversation[0].content

    def encode(self, text: str) -> list[int]:
        return self.encoder.encode(text)


@dataclass
class _Call:
    """One call waiting for the generator."""

    prompt: list[int]
    budget: int
    seed: int
    key: tuple[Any, ...]
    """(stop strings, temperature, top-p, top log-probs): calls that share it share a generate call."""
    grammar: str | None = None
    tokens: queue.Queue[tuple[int, float, dict[int, float] | None] | None] | None = None
    """Each token as it is sampled, then None (streaming calls only)."""
    done: Future = field(default_factory=Future)


@dataclass
class _Pending:
    """A call submitted for one session, until its turn is recorded."""

    call: Call
    api: Api
    job: _Call
    stream: TokenStream
    new_segment: bool
    messages: list[Message]
    mode: str
    tools: list[dict[str, Any]]
    sampling: tuple[float, float]
    text: TextStream | None
    head: Head


@dataclass
class Response:
    """What the HTTP side sends: a JSON body, or (streaming) a sequence of server-sent events."""

    status: int
    body: dict[str, Any] | None = None
    events: Iterator[tuple[str | None, dict[str, Any]]] | None = None
    done_marker: bool = False
    """True: the event stream ends with `data: [DONE]`."""


class Gateway:
    """Sessions, routes and batched generation over one policy (an hf or vllm backend with a tokenizer)."""

    def __init__(self, policy: Policy, sampling: SamplingParams | None = None, *,
                 model_name: str | None = None, reader: TurnReader | None = None,
                 batch_window_s: float = BATCH_WINDOW_S, max_batch: int = 64) -> None:
        if not isinstance(policy, ChatEncoder) or not hasattr(policy, "eos_ids"):
            raise UserError(f"the gateway needs a policy that renders and tokenizes ({type(policy).__name__} "
                            "does not)", field="policy.backend", fix="use an hf or vllm policy")
        self.policy = policy
        self.encoder: ChatEncoder = policy
        self.sampling = sampling or SamplingParams()
        self.model_name = model_name or str(getattr(policy, "name", "rlvr-policy"))
        self.reader = reader or reader_of(policy)
        """How the model writes tool calls (the one place its turns are read: `TurnReader.parse`)."""
        tok = getattr(policy, "tokenizer", None)
        eos = frozenset(policy.eos_ids)  # type: ignore[attr-defined]
        # every end token's text: Llama ends a call with <|eom_id|> where its template writes <|eot_id|>
        self.eos: tuple[frozenset[int], tuple[str, ...]] = (eos, end_texts(tok, eos) if tok else ())
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
        """The session of a request's key: `Authorization: Bearer KEY` (OpenAI, ANTHROPIC_AUTH_TOKEN),
        `x-api-key` (Anthropic) or `api-key` (Azure-style clients)."""
        auth = headers.get("authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else (
            headers.get("x-api-key") or headers.get("api-key") or "").strip()
        s = self.sessions.get(key) if key and (only is None or key == only) else None
        if s is None:
            shown = (key[:8] + "..." + key[-4:]) if len(key) > 12 else "(none)" if not key else "..."
            raise ApiError(401, f"Incorrect API key provided: {shown}. Each episode has its own key, in "
                           "OPENAI_API_KEY and ANTHROPIC_API_KEY; keys end with their episode.",
                           type="authentication_error", code="invalid_api_key")
        return s

    # --------------------------------------------------------------------------------------------- routes
    def handle(self, method: str, path: str, headers: dict[str, str], body: Any, *, only: str | None = None
               ) -> Response:
        """One request: `body` is the decoded JSON (None for GET); `only` limits the listener to one key.
        Errors come back in the error body of the route's API."""
        path = path.split("?", 1)[0].rstrip("/")
        api = ROUTES.get(("POST", path)) or (anthropic.MESSAGES if path.startswith("/v1/messages") else None)
        render = api.error if api is not None else openai_error
        try:
            session = self.authorize({k.lower(): v for k, v in headers.items()}, only)
            if (method, path) in ROUTES:
                return self._serve(session, ROUTES[method, path], body)
            if (method, path) == ("POST", "/v1/messages/count_tokens"):
                return Response(200, {"input_tokens": self._count(session, anthropic.MESSAGES.parse(
                    {"max_tokens": 1, **body} if isinstance(body, dict) else body))})
            if (method, path) == ("GET", "/v1/models"):
                return Response(200, wire.models_response(self.model_name))
            if (method, path) == ("GET", "/rlvr/stop"):
                session.stopped.wait(STOP_POLL_S)
                return Response(200, {"stop": session.truncated_by or ("closed" if session.closed else None)})
            known = sorted({p for _, p in ROUTES} | {"/v1/models", "/v1/messages/count_tokens"})
            if any(p == path for _, p in ROUTES):
                raise ApiError(405, f"{method} is not allowed on {path}")
            raise ApiError(404, f"unknown path {path}; the gateway serves {', '.join(known)}",
                           type="not_found_error", code="unknown_url")
        except ApiError as exc:
            return Response(exc.status, render(exc))

    def _serve(self, session: AgentSession, api: Api, body: Any) -> Response:
        pending = self._begin(session, api.parse(body), api)
        if pending.call.stream:
            return Response(200, events=api.stream(pending.call, pending.head, self._items(session, pending)),
                            done_marker=api.done_marker)
        return Response(200, api.reply(pending.call, self._end(session, pending)))

    def _items(self, session: AgentSession, p: _Pending) -> Iterator[Any]:
        """A streamed turn: its pieces as the tokens come, then the recorded Turn (or the ApiError of a failed
        generation). The turn is recorded even if the caller goes away mid-stream."""
        ended = False
        try:
            assert p.job.tokens is not None and p.text is not None
            while (item := p.job.tokens.get()) is not None:
                piece = p.text.push(*item)
                if piece is not None:
                    yield piece
            try:
                turn = self._end(session, p)
            except ApiError as exc:
                ended = True
                yield exc
                return
            ended = True
            yield turn
        finally:
            if not ended:
                try:
                    self._end(session, p)
                except ApiError:
                    pass

    def _history(self, session: AgentSession, call: Call) -> list[Message]:
        """The call's messages as the model wrote them: an assistant turn the gateway sent is its raw text,
        one it did not write is written in the model's call form; tool results named after their calls."""
        out = []
        for m in named(call.messages):
            if m.role == "assistant":
                raw = session.raw_of(m.content, m.tool_calls)
                m = Message(role="assistant", content=raw if raw is not None else
                            self.reader.turn(m.tool_calls, m.content))
            out.append(m)
        return out

    def _count(self, session: AgentSession, call: Call) -> int:
        """Tokens of the call's prompt, rendered as a generating call would render it."""
        msgs, tools = self._prompt_messages(session, call)
        stream = TokenStream(self.encoder, tools=tools if self.native_tools and tools else None)
        return len(stream.prompt(msgs))

    def _prompt_messages(self, session: AgentSession, call: Call) -> tuple[list[Message], list[dict[str,
                                                                                                    Any]]]:
        if call.api == "completions":
            return [Message(role="user", content=call.prompt or "")], []
        msgs = self._history(session, call)
        tools = call.tools if call.tool_choice != "none" else []
        if tools and not self.native_tools:
            msgs = with_system(msgs, tools_text(tools, call.tool_choice, self.reader.hint))
        return msgs, tools

    # ------------------------------------------------------------------------------------------- one call
    def _begin(self, session: AgentSession, call: Call, api: Api) -> _Pending:
        """Budgets, the prompt (extending the segment, or a new one) and the submitted generation of one call;
        the session stays locked until `_end` records it."""
        session.lock.acquire()
        try:
            return self._submit_call(session, call, api)
        except UserError as exc:  # the chat template cannot render this conversation
            session.lock.release()
            raise ApiError(400, str(exc), param="messages") from None
        except BaseException:
            session.lock.release()
            raise

    def _submit_call(self, session: AgentSession, call: Call, api: Api) -> _Pending:
        if session.closed:
            raise ApiError(401, "this episode has ended; its key is no longer valid",
                           type="authentication_error", code="invalid_api_key")
        if session.max_turns is not None and session.calls >= session.max_turns:
            raise _refuse(session, "turns", f"the episode's turn budget ({session.max_turns} calls) is spent")
        left = None if session.max_tokens is None else session.max_tokens - session.generated
        if left is not None and left <= 0:
            raise _refuse(session, "tokens",
                          f"the episode's token budget ({session.max_tokens} tokens) is spent")
        grammar = constraint(call, self.reader)
        msgs, tools = self._prompt_messages(session, call)
        mode = "raw" if call.api == "completions" else "chat"
        encoder: Any = _Raw(self.encoder) if mode == "raw" else self.encoder
        fresh = TokenStream(encoder, tools=list(tools) if self.native_tools and tools else None)
        stream, new_segment = self._extend(session, msgs, fresh, mode)
        prompt = list(stream.ids)
        room = self.encoder.max_context - len(prompt)
        if room <= 0:
            message = (f"this model's maximum context length is {self.encoder.max_context} tokens; the "
                       f"messages take {len(prompt)}")
            session.stop("context", message)
            raise ApiError(400, message, param="messages", code="context_length_exceeded")
        budget = min(x for x in (call.max_tokens, self.sampling.max_new_tokens, left, room) if x is not None)
        seed = (call.seed if call.seed is not None else session.seed) + 1_000_003 * session.calls
        sp = self.sampling
        sampling = (sp.temperature if call.temperature is None else call.temperature,
                    sp.top_p if call.top_p is None else call.top_p)
        stops = tuple(sp.stop) + call.stop
        job = _Call(prompt, budget, seed, (stops, *sampling, call.top_logprobs), grammar,
                    queue.Queue() if call.stream else None)
        text = None
        if call.stream:
            text = TextStream(self._decode, self.reader.opener if tools else None, self.eos[0],
                              stops=call.stop,
                              token_text=self._token_text if call.logprobs else None)
        head = Head(api.id_prefix + secrets.token_hex(12), self.model_name, len(prompt), int(time.time()))
        self._queue.put(job)
        return _Pending(call, api, job, stream, new_segment, msgs, mode, tools, sampling, text, head)

    def _end(self, session: AgentSession, p: _Pending) -> Turn:
        """Wait for the call's completion, record it in the session, and build its Turn."""
        try:
            comp: Completion = p.job.done.result()  # the generator always resolves it
            if comp.finish_reason == "error":
                raise ApiError(500, f"the policy failed to generate: {comp.error}", type="server_error")
            start = self._record(session, p, comp)
            return self._turn(session, p, comp, start)
        finally:
            session.lock.release()

    def _record(self, session: AgentSession, p: _Pending, comp: Completion) -> int:
        """Put the completion into the session's record; where its tokens start in the segment."""
        if p.new_segment and session.stream is not None:
            session.segments.append(Segment(list(session.stream.ids), list(session.stream.mask),
                                            list(session.stream.logprobs), list(session.messages)))
        start = len(p.stream.ids)
        p.stream.add_completion(comp, *self.eos)
        session.stream, session.mode = p.stream, p.mode
        session.messages = [*p.messages, Message(role="assistant", content=comp.text)]
        session.calls += 1
        session.generated += len(comp.token_ids)
        session.finish_reasons.append(comp.finish_reason)
        session.versions.append(comp.policy_version if comp.policy_version is not None
                                else int(getattr(self.policy, "generation_version", self.policy.version)))
        if session.max_tokens is not None and session.generated >= session.max_tokens:
            session.stop("tokens")
        return start

    def _turn(self, session: AgentSession, p: _Pending, comp: Completion, start: int) -> Turn:
        call = p.call
        text = comp.text
        hit = [(text.find(s), s) for s in call.stop if s in text] if comp.finish_reason == "stop" else []
        stop_sequence = min(hit)[1] if hit else None
        cut = text[:text.find(stop_sequence)] if stop_sequence else text
        calls, content = [], cut
        if p.tools:
            prefix = f"{p.api.call_prefix}{session.calls}_{secrets.token_hex(3)}"
            calls, content = self.reader.parse(cut, p.tools, prefix)
            content = content.strip()
        if p.text is not None:  # what the caller holds: the streamed text, then the rest
            content = p.text.sent + p.text.rest(content)
        session.sent(SentTurn(text, content, calls))
        session.tool_names += [c.name for c in calls]
        sp = self.sampling
        session.log.append({"api": call.api, "segment": len(session.segments), "start": start,
                            "end": start + len(comp.token_ids), "tool_calls": [c.name for c in calls],
                            "constrained": p.job.grammar is not None,
                            "temperature": p.sampling[0], "top_p": p.sampling[1],
                            "run_sampling": p.sampling == (sp.temperature, sp.top_p)})
        tokens = []
        if call.logprobs:
            tops = comp.top_logprobs or [None] * len(comp.token_ids)
            tokens = [info(self._token_text, t, lp, top) for t, lp, top in zip(comp.token_ids, comp.logprobs,
                                                                               tops)
                      if t not in self.eos[0]]
        finish = "tool_calls" if calls else "length" if comp.finish_reason == "length" else "stop"
        return Turn(p.head.id, self.model_name, text, content, calls, finish, stop_sequence,
                    p.head.prompt_tokens, len(comp.token_ids), tokens)

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

    def _decode(self, ids: list[int]) -> str:
        # a streamed turn is decoded as the whole turn is: the dialect's markers kept, so the reader's opener
        # holds back a call the model writes after special tokens (Mistral's [TOOL_CALLS], Kimi's sections)
        decode = getattr(self.policy, "decode_turn", None) or self.policy.decode  # type: ignore[attr-defined]
        return decode(ids)  # type: ignore[no-any-return]

    def _token_text(self, token: int) -> str:
        return self._decode([token])

    # ----------------------------------------------------------------------------------------- generation
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
            for key in dict.fromkeys(c.key for c in batch):  # one generate call per way of sampling
                self._generate([c for c in batch if c.key == key])

    def _generate(self, batch: list[_Call]) -> None:
        stop, temperature, top_p, top = batch[0].key
        streaming = [c for c in batch if c.tokens is not None]

        def sink(row: int, token: int, logprob: float, alt: dict[int, float] | None) -> None:
            q = batch[row].tokens
            if q is not None:
                q.put((token, logprob, alt))

        params = SamplingParams(temperature=temperature, top_p=top_p,
                                max_new_tokens=max(c.budget for c in batch),
                                stop=stop, seeds=tuple(c.seed for c in batch),
                                budgets=tuple(c.budget for c in batch), top_logprobs=top,
                                constraints=tuple(c.grammar for c in batch)
                                if any(c.grammar is not None for c in batch) else None,
                                on_token=sink if streaming else None)
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
            if call.tokens is not None:
                call.tokens.put(None)


def bad_budget(message: str) -> ApiError:
    return ApiError(400, message + "; the episode is over", code="budget_exhausted")


def _refuse(session: AgentSession, budget: str, message: str) -> ApiError:
    """The error refusing a call for a spent `budget`, the agent stopped and the refusal recorded."""
    session.stop(budget, message)
    return bad_budget(message)
