"""The `openai` backend: any OpenAI-compatible chat-completions server (vLLM, SGLang, ...), queried
concurrently with an async httpx client, with timeouts and retries on transport errors, 429 and 5xx.

Token ids are not part of the chat API, so completions carry the server's per-token log-probs when it returns
them and no token ids; the env loop then records the transcript without a token stream. A request that still
fails after its retries becomes a completion with finish_reason "error" (an infra fault: the env loop retries
the turn, then masks the episode), never an exception.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Sequence
from typing import Any

from rlvr.envs.messages import Message, message_dicts
from rlvr.envs.parse import parse_openai
from rlvr.errors import UserError
from rlvr.rollout.policy import Completion, SamplingParams

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth retrying (overload and transient server faults)."""


class OpenAIPolicy:
    """A model behind `POST {base_url}/chat/completions`."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, max_concurrency: int = 64,
                 tools: list[dict[str, Any]] | None = None, backoff_s: float = 0.5) -> None:
        try:
            import httpx  # noqa: F401
        except ModuleNotFoundError:
            raise UserError("the openai backend needs httpx", fix="pip install 'rlvr[train]'") from None
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"base URL {base_url!r} is not http(s)", field="policy",
                            fix="e.g. http://127.0.0.1:8000/v1")
        self.base_url = base_url.rstrip("/")
        self.model_name = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        """Bearer token; default `$OPENAI_API_KEY` (servers such as vLLM started with --api-key need one)."""
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self.tools = tools
        """OpenAI tool specs sent with each request (None: tool calls travel in the text format)."""
        self.backoff_s = backoff_s
        self.version = 0

    def generate(self, conversations: Sequence[list[Message]], params: SamplingParams, *,
                 prompt_token_ids: Sequence[list[int] | None] | None = None) -> list[Completion]:
        """One request per conversation, all in flight together (bounded by max_concurrency)."""
        seeds = list(params.seeds) if params.seeds is not None else [None] * len(conversations)
        return asyncio.run(self._all(list(conversations), params, seeds))

    async def _all(self, convs: list[list[Message]], params: SamplingParams,
                   seeds: list[int | None]) -> list[Completion]:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        sem = asyncio.Semaphore(self.max_concurrency)
        limits = httpx.Limits(max_connections=self.max_concurrency)
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s), headers=headers,
                                     limits=limits) as client:
            async def one(conv: list[Message], seed: int | None, i: int) -> Completion:
                async with sem:
                    return await self._request(client, self._body(conv, params, seed, params.budget(i)))
            return list(await asyncio.gather(*(one(c, s, i) for i, (c, s) in enumerate(zip(convs, seeds)))))

    def _body(self, conv: list[Message], params: SamplingParams, seed: int | None, budget: int) -> dict[str,
                                                                                                        Any]:
        body: dict[str, Any] = {"model": self.model_name, "messages": openai_messages(conv),
                                "temperature": params.temperature, "top_p": params.top_p,
                                "max_tokens": budget, "logprobs": True}
        if seed is not None:
            body["seed"] = int(seed) & 0x7FFF_FFFF
        if params.stop:
            body["stop"] = list(params.stop)
        if self.tools:
            body["tools"] = self.tools
        return body

    async def _request(self, client: Any, body: dict[str, Any]) -> Completion:
        import httpx

        error = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random()))
            try:
                resp = await client.post(f"{self.base_url}/chat/completions", json=body)
            except httpx.HTTPError as exc:  # connect errors, timeouts, broken connections
                error = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code in RETRY_STATUS:
                error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code >= 400:  # a bad request does not get better by asking again
                return Completion(text="", finish_reason="error",
                                  error=f"HTTP {resp.status_code}: {resp.text[:200]}")
            try:
                return parse_response(resp.json())
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                error = f"malformed response: {exc}"
        return Completion(text="", finish_reason="error",
                          error=f"after {self.max_retries + 1} attempts: {error}")


def openai_messages(conv: list[Message]) -> list[dict[str, Any]]:
    """Messages in the chat API's shape: an assistant's native calls go back with it, as the API requires."""
    out = message_dicts(conv)
    for d, m in zip(out, conv):
        if m.role == "assistant" and m.tool_calls:
            d["tool_calls"] = [{"id": c.id or f"call_{i}", "type": "function",
                                "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                               for i, c in enumerate(m.tool_calls)]
    return out


def parse_response(data: dict[str, Any]) -> Completion:
    """A chat-completions response body -> Completion (raises on a body that is not one)."""
    choice = data["choices"][0]
    msg = choice.get("message") or {}
    text = msg.get("content") or ""
    calls, errors = parse_openai(msg.get("tool_calls") or [])
    lp = (choice.get("logprobs") or {}).get("content") or []
    logprobs = [float(x["logprob"]) for x in lp]
    reason = choice.get("finish_reason") or "stop"
    reason = {"tool_calls": "stop", "length": "length"}.get(reason, "stop")
    token_ids = [int(t) for t in choice.get("token_ids") or []]  # vLLM returns them when asked
    if len(token_ids) != len(logprobs):
        token_ids = []
    return Completion(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=reason,
                      tool_calls=calls,
                      call_errors=errors)
