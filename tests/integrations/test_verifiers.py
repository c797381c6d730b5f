"""The verifiers taskset `rlvr-tasks` under verifiers' own `vf-eval`, against a scripted OpenAI-compatible
model on 127.0.0.1: multi-turn code tasks act through rlvr's tools in rlvr's sandbox, single-turn tasks
answer, and every reward verifiers records is the verdict rlvr's Scorer gives the same final state."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rlvr.integrations.session import Runtime
from tests.conftest import ADD_HIDDEN, ADD_WORKSPACE, write_task

pytestmark = pytest.mark.integrations

SRC = Path(__file__).resolve().parents[2] / "src"
CODE = {"gold": "def add(a, b):\n    return a + b\n", "wrong": "def add(a, b):\n    return a - b\n",
        "half": "def add(a, b):\n    return 5\n", "stub": None}
"""What the scripted model writes to add.py in the code task of that name (None: it only submits)."""
MATH = "math:3"


class Model(BaseHTTPRequestHandler):
    """A scripted chat-completions endpoint: per code task, write add.py (as CODE says), run the tests,
    submit; per single-turn task, the reply `answers` holds for its prompt (as text, or through the submit
    tool)."""

    answers: ClassVar[dict[str, tuple[str, bool]]] = {}
    requests: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Model.requests.append(body)
        messages, tools = body["messages"], {t["function"]["name"] for t in body.get("tools", [])}
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        done = sum(m["role"] == "tool" for m in messages)
        msg: dict[str, Any] = {"role": "assistant", "content": None}
        if body["model"] == "breaks" and done:  # the endpoint fails mid-episode, a sandbox lease held
            return self._send(400, {"error": {"message": "bad request", "type": "invalid_request_error"}})
        if tools == {"submit"}:
            answer, via_tool = Model.answers[prompt]
            if via_tool:
                msg["tool_calls"] = [_call(0, "submit", {"answer": answer})]
            else:
                msg["content"] = answer
        else:
            content = CODE[prompt.rsplit(" ", 1)[-1]]
            plan: list[tuple[str, Any]] = [("write_file",
                                            '{"path": "add.py", oops')] if content == CODE["half"] else []
            plan += ([("write_file", {"path": "add.py", "content": content})] if content is not None
                     else []) + [
                ("run_tests", {}), ("submit", {})]
            msg["tool_calls"] = [_call(done, *plan[done])]
        self._send(200, {"id": f"r{len(Model.requests)}", "object": "chat.completion", "created": 0,
                         "model": body["model"], "choices": [{"index": 0, "message": msg,
                                                              "finish_reason": "tool_calls"
                                                              if "tool_calls" in msg else "stop"}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def code_toml(name: str) -> str:
    """A multi-turn code task (a turn budget makes it one)."""
    return f'id = "{name}"\ndomain = "code"\n[limits]\nmax_turns = 6\n'


def _call(i: int, name: str, args: dict[str, Any] | str) -> dict[str, Any]:
    """A tool call; `args` as a string is sent as it is (malformed JSON, say)."""
    return {"id": f"c{i}", "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


@pytest.fixture(scope="module")
def model() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def vf_eval(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """verifiers' own `vf-eval` entry point, in a fresh interpreter (as a user runs it)."""
    code = "import sys; from verifiers.v1.cli.eval.main import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd,
                          check=False, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC),
                                            "HOME": str(cwd)})


def traces(out: Path) -> list[dict[str, Any]]:
    (path,) = out.glob("*/traces.jsonl")
    return [t for line in path.read_text().splitlines() for t in json.loads(line)["traces"]]


def expected_rewards(spec: str) -> dict[str, float]:
    """rlvr's verdicts, in process, for the final states the scripted model leads to."""
    out: dict[str, float] = {}
    with Runtime.build(spec) as runtime:
        for task in runtime.tasks:
            ep = runtime.session()
            ep.start(task, seed=0)
            if task.multi_turn:
                content = CODE[task.prompt.rsplit(" ", 1)[-1]]
                if content is not None:
                    ep.call("write_file", {"path": "add.py", "content": content})
                ep.call("run_tests")
                ep.call("submit")
            else:
                ep.answer(Model.answers[task.prompt][0])
            out[task.key] = ep.finish().reward
    return out


def test_vf_eval_rewards_are_rlvrs_verdicts(model: str, tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    for name in CODE:
        write_task(pack, name, toml=code_toml(name), prompt=f"Write add(a, b). {name}",
                   workspace=ADD_WORKSPACE,
                   hidden=ADD_HIDDEN)
    spec = f"{pack},{MATH}"
    with Runtime.build(MATH) as runtime:  # right as text, right through submit, wrong
        Model.answers = {t.prompt: (f"<answer>{t.answer if i < 2 else '-1'}</answer>", i == 1)
                         for i, t in enumerate(runtime.tasks)}
    expected = expected_rewards(spec)
    assert expected["code/gold"] == 1.0 and expected["code/wrong"] == expected["code/stub"] == 0.0
    assert [expected[f"math/s0-{i}"] for i in range(3)] == [1.0, 1.0, 0.0]

    r = vf_eval("rlvr-tasks", "--env.taskset.tasks", spec, "-m", "scripted", "--client.base-url", model,
                "--no-push", "--no-rich", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {t["task"]["key"]: t for t in traces(tmp_path / "out")}
    assert set(got) == set(expected)
    for key, trace in got.items():
        assert trace["ok"], (key, trace["errors"])
        assert trace["rewards"]["rlvr"]["score"] == expected[key], key
        verdict = trace["info"]["rlvr"]
        assert verdict["reward"] == expected[key] and verdict["infra_error"] is None
        assert trace["metrics"]["rlvr_passed"] == float(verdict["passed"])
        assert ("hidden" not in json.dumps(trace["task"])
                and ADD_HIDDEN["test_hidden.py"] not in json.dumps(trace))
    assert got["code/stub"]["info"]["rlvr"]["flags"]  # an untouched stub is flagged (no_change): reward 0
    # the model saw rlvr's tools, and the tool results came back to it through verifiers' interception
    code_calls = [b for b in Model.requests if "Write add" in json.dumps(b["messages"][:1])]
    assert {t["function"]["name"] for t in code_calls[0]["tools"]} >= {"write_file", "run_tests", "submit"}
    tool_results = [m.get("content", "") for b in code_calls for m in b["messages"] if m["role"] == "tool"]
    assert any("passed" in t or "failed" in t for t in tool_results)
    # malformed: told, no crash
    assert any(t.startswith("error: the arguments are not JSON") for t in tool_results)


def test_a_failed_rollout_gives_its_sandbox_back(model: str, tmp_path: Path) -> None:
    """In process, so the pool can be inspected: the endpoint fails after write_file, with the lease held."""
    from verifiers.v1.cli.eval.main import main

    pack = tmp_path / "pack"
    for name in ("gold", "wrong"):
        write_task(pack, name, toml=code_toml(name), prompt=f"Write add(a, b). {name}",
                   workspace=ADD_WORKSPACE,
                   hidden=ADD_HIDDEN)
    main(["rlvr-tasks", "--env.taskset.tasks", str(pack), "-m", "breaks", "--client.base-url", model,
          "--no-push",
          "--no-rich", "-o", str(tmp_path / "out")])
    got = traces(tmp_path / "out")
    assert len(got) == 2 and not any(t["ok"] for t in got)
    wrote = [b for b in Model.requests if b["model"] == "breaks"
             and any(m["role"] == "tool" for m in b["messages"])]
    assert len(wrote) == 2  # each episode had written add.py in its sandbox when the endpoint failed
    assert all(t["rewards"].get("rlvr") is None for t in got)  # failed, not scored 0: a trainer drops them
    runtime = Runtime.shared(str(pack), n=None, seed=0, offset=0)
    try:
        assert os.listdir(runtime.pool.base / "leases") == []  # type: ignore[attr-defined]
    finally:
        runtime.close()


def test_a_verdict_rlvr_could_not_judge_is_not_scored(model: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An infra-error verdict (the verifier could not judge) fails the rollout's scoring: no reward, never
    0."""
    from verifiers.v1.cli.eval.main import main

    from rlvr.integrations.session import EnvSession
    from rlvr.verify.scorer import Scored
    from rlvr.verify.verdict import Verdict

    def broken_verifier(self: EnvSession) -> Scored:
        self.close()
        return Scored(Verdict(score=0.0, passed=False, infra_error="verifier sandbox lost"), 0.0)

    monkeypatch.setattr(EnvSession, "finish", broken_verifier)
    pack = tmp_path / "pack"
    write_task(pack, "gold", toml=code_toml("gold"), prompt="Write add(a, b). gold", workspace=ADD_WORKSPACE,
               hidden=ADD_HIDDEN)
    main(["rlvr-tasks", "--env.taskset.tasks", str(pack), "-m", "scripted", "--client.base-url", model,
          "--no-push",
          "--no-rich", "-o", str(tmp_path / "out")])
    (trace,) = traces(tmp_path / "out")
    assert not trace["ok"] and trace["rewards"].get("rlvr") is None
    assert "verifier sandbox lost" in json.dumps(trace["errors"])
    assert trace["info"]["rlvr"]["infra_error"] == "verifier sandbox lost"
    Runtime.shared(str(pack), n=None, seed=0, offset=0).close()


def test_a_bad_spec_is_a_config_error(tmp_path: Path) -> None:
    r = vf_eval("rlvr-tasks", "--env.taskset.tasks", "nosuch:3", "-m", "scripted", "--client.base-url",
                "http://127.0.0.1:9/v1", "--no-push", "--no-rich", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode != 0
    assert "unknown domain 'nosuch'" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not list(tmp_path.glob("out/*/traces.jsonl"))
