"""The openai backend against a small OpenAI-compatible server on 127.0.0.1: batching, retries, timeouts."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from rlvr.config import RolloutConfig
from rlvr.envs.messages import Message
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.policies.openai import OpenAIPolicy
from rlvr.rollout.policy import SamplingParams
from rlvr.tasks.spec import Task, TaskLimits


class Handler(BaseHTTPRequestHandler):
    hits: ClassVar[dict[str, int]] = {}
    bodies: ClassVar[list[dict]] = []

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, code: int, payload: object) -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body["_auth"] = self.headers.get("Authorization")
        Handler.bodies.append(body)
        model = body["model"]
        n = Handler.hits[model] = Handler.hits.get(model, 0) + 1
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": "no route"})
        if model == "flaky" and n <= 2:
            return self._send(503, {"error": "overloaded"})
        if model == "slow":
            time.sleep(1.0)
        if model == "bad":
            return self._send(400, {"error": "bad request"})
        if model == "garbage":
            return self._send(200, "not json at all")
        last = body["messages"][-1]["content"]
        msg: dict = {"role": "assistant", "content": f"echo: {last}"}
        if model == "badtools":
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c8", "type": "function", "function": {"name": "submit", "arguments": "{oops"}}]}
        if model == "tools":
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c9", "type": "function",
                 "function": {"name": "submit", "arguments": '{"answer": "42"}'}}]}
        self._send(200, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop",
                                      "logprobs": {"content": [{"token": "e", "logprob": -0.25},
                                                               {"token": "c", "logprob": -0.5}]}}]})


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that gave up (the `slow` model's timeout) leaves a broken pipe: not an error of the test,
        and printed on stderr it would land in whatever test runs next."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def server():
    srv = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def convs(n: int) -> list[list[Message]]:
    return [[Message(role="user", content=f"q{i}")] for i in range(n)]


def test_batch_of_requests(server) -> None:
    pol = OpenAIPolicy(server, "ok")
    out = pol.generate(convs(5), SamplingParams(temperature=0.5, max_new_tokens=7, seeds=(1, 2, 3, 4, 5)))
    assert [c.text for c in out] == [f"echo: q{i}" for i in range(5)]
    assert out[0].logprobs == [-0.25, -0.5] and out[0].num_tokens == 2 and out[0].finish_reason == "stop"
    sent = [b for b in Handler.bodies if b["model"] == "ok"]
    assert {b["max_tokens"] for b in sent} == {7} and sorted(b["seed"] for b in sent) == [1, 2, 3, 4, 5]


def test_api_key_is_sent(server, monkeypatch) -> None:
    OpenAIPolicy(server, "keyed", api_key="sk-one").generate(convs(1), SamplingParams())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    OpenAIPolicy(server, "keyed").generate(convs(1), SamplingParams())
    assert [b["_auth"] for b in Handler.bodies if b["model"] == "keyed"] == ["Bearer sk-one", "Bearer sk-env"]


def test_overload_is_retried(server) -> None:
    [c] = OpenAIPolicy(server, "flaky", max_retries=3, backoff_s=0.01).generate(convs(1), SamplingParams())
    assert c.finish_reason == "stop" and Handler.hits["flaky"] == 3


def test_timeouts_and_bad_requests_become_error_completions(server) -> None:
    t0 = time.perf_counter()
    policy = OpenAIPolicy(server, "slow", timeout_s=0.2, max_retries=1, backoff_s=0.01)
    [slow] = policy.generate(convs(1), SamplingParams())
    assert slow.finish_reason == "error" and "Timeout" in slow.error and time.perf_counter() - t0 < 1.5
    [bad] = OpenAIPolicy(server, "bad", max_retries=3, backoff_s=0.01).generate(convs(1), SamplingParams())
    assert bad.finish_reason == "error" and "400" in bad.error and Handler.hits["bad"] == 1
    [junk] = OpenAIPolicy(server, "garbage", max_retries=0).generate(convs(1), SamplingParams())
    assert junk.finish_reason == "error" and "malformed" in junk.error


def test_unreachable_server() -> None:
    [c] = OpenAIPolicy("http://127.0.0.1:9/v1", "m", max_retries=0, timeout_s=1).generate(convs(1),
                                                                                          SamplingParams())
    assert c.finish_reason == "error" and "Connect" in c.error


def test_native_tool_calls_drive_an_episode(server, pool) -> None:
    task = Task(id="t", domain="toy", prompt="solve", workspace={"sol.py": "x"},
                verifier={"kind": "test-rollout-file"},
                limits=TaskLimits(max_turns=3))
    [ep] = EnvRollouts(OpenAIPolicy(server, "tools"), pool, config=RolloutConfig()).run([task], 1)
    assert ep.status == "done" and ep.final_state.answer == "42" and ep.reward == 1.0
    assert ep.messages[-1].tool_call_id == "c9" and ep.token_ids == [] and ep.num_generated_tokens == 2


def test_malformed_native_calls_are_reported_to_the_model(server, pool) -> None:
    task = Task(id="t", domain="toy", prompt="solve", workspace={"sol.py": "x"},
                verifier={"kind": "test-rollout-file"},
                limits=TaskLimits(max_turns=2))
    [ep] = EnvRollouts(OpenAIPolicy(server, "badtools"), pool, config=RolloutConfig()).run([task], 1)
    assert ep.status == "truncated" and ep.truncated_by == "turns"
    feedback = [m.content for m in ep.messages if m.role == "user"][1:]
    assert feedback and all("arguments are not valid JSON" in f for f in feedback)


def test_native_calls_are_sent_back_with_the_assistant_message() -> None:
    from rlvr.envs.messages import ToolCall
    from rlvr.rollout.policies.openai import openai_messages

    conv = [Message(role="user", content="q"),
            Message(role="assistant", content="",
                    tool_calls=[ToolCall(id="c1", name="run", arguments={"command": "ls"})]),
            Message(role="tool", content="a.py", tool_call_id="c1", name="run")]
    out = openai_messages(conv)
    assert out[1]["tool_calls"] == [{"id": "c1", "type": "function",
                                     "function": {"name": "run", "arguments": '{"command": "ls"}'}}]
    assert out[2] == {"role": "tool", "content": "a.py", "tool_call_id": "c1", "name": "run"}
