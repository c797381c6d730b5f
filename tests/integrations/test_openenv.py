"""`rlvr serve` as a real OpenEnv server on 127.0.0.1, driven by openenv-core's own client."""
from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openenv.core.env_server.mcp_types import CallToolAction, ToolErrorType
from openenv.core.mcp_client import MCPToolClient

from rlvr.envs.tools import TOOLS
from rlvr.integrations.openenv import RlvrClient
from tests.conftest import ADD_SOLUTION
from tests.integrations.servers import Server, serve, write_add_pack

pytestmark = pytest.mark.integrations

TOKEN = "0123456789abcdef-test-token"


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_add_pack(tmp_path_factory.mktemp("pack"))


@pytest.fixture(scope="module")
def server(pack: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serve(str(pack), tmp=tmp_path_factory.mktemp("srv")) as s:
        yield s


@pytest.fixture(scope="module")
def guarded(pack: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server behind a bearer token, whose idle sessions expire after 1 s."""
    with serve(str(pack), "--idle-timeout", "1", token=TOKEN, tmp=tmp_path_factory.mktemp("guarded")) as s:
        yield s


def wait_until(cond, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_an_episode_over_websocket_ends_with_the_verdict(server: Server) -> None:
    async def episode() -> None:
        async with MCPToolClient(base_url=server.url) as env:
            first = await env.reset(seed=0, task="code/add")
            meta = first.observation.metadata
            assert meta["task"] == "code/add" and meta["prompt"] == "Write add(a, b)." and meta["multi_turn"]
            assert [m["role"] for m in meta["messages"]] == ["user"]
            tools = {t.name: t for t in await env.list_tools()}
            assert set(tools) == set(TOOLS)
            assert tools["write_file"].input_schema["required"] == ["path", "content"]
            assert "add.py" in await env.call_tool("list_files")
            failing = await env.call_tool("run_tests")
            assert "NotImplementedError" in failing
            step = await env.step(CallToolAction(tool_name="write_file",
                                                 arguments={"path": "add.py",
                                                            "content": ADD_SOLUTION["add.py"]}))
            assert not step.done and step.reward is None
            end = await env.step(CallToolAction(tool_name="submit", arguments={}))
            assert end.done and end.reward == 1.0, end.observation.metadata["flags"]
            verdict = end.observation.metadata
            assert verdict["passed"] and verdict["score"] == 1.0 and verdict["flags"] == []
            assert verdict["checks"] and all(c["passed"] for c in verdict["checks"])
            # the episode is over: further calls are refused, a reset starts afresh on another task (by index)
            assert "episode is over" in await env.call_tool("list_files")
            again = await env.reset(seed=3, task=1)
            assert again.observation.metadata["task"] == "code/add2"
            end = await env.step(CallToolAction(tool_name="submit", arguments={}))
            assert end.done and end.reward == 0.0 and not end.observation.metadata["passed"]
            assert (await env.state()).step_count == 1
    asyncio.run(episode())
    assert wait_until(lambda: server.leases() == [])


def test_malformed_actions_get_protocol_errors_and_the_session_lives_on(server: Server) -> None:
    async def run() -> None:
        async with MCPToolClient(base_url=server.url) as env:
            before = await env.step(CallToolAction(tool_name="list_files", arguments={}))
            assert before.observation.error.error_type == ToolErrorType.EXECUTION_ERROR
            assert "reset first" in before.observation.error.message
            await env.reset(task="code/add")
            for raw, code in ((b"{not json", "INVALID_JSON"),
                              ({"type": "step", "data": {"type": "call_tool"}}, "VALIDATION_ERROR"),
                              ({"type": "step", "data": {"type": "dance"}}, "VALIDATION_ERROR"),
                              ({"type": "reset", "data": {"task": "code/nope"}}, "EXECUTION_ERROR"),
                              ({"type": "reset", "data": {"colour": "red"}}, "EXECUTION_ERROR"),
                              ({"type": "bogus"}, "UNKNOWN_TYPE")):
                assert env._ws is not None
                await env._ws.send(raw.decode() if isinstance(raw, bytes) else json.dumps(raw))
                reply = json.loads(await env._ws.recv())
                assert reply["type"] == "error" and reply["data"]["code"] == code, reply
            unknown = await env.step(CallToolAction(tool_name="rm_rf", arguments={}))
            assert unknown.observation.error.error_type == ToolErrorType.TOOL_NOT_FOUND
            bad_args = await env.call_tool("read_file", path=7)
            assert bad_args.startswith("error: read_file")
            # the same session still works, on the same lease
            assert "add.py" in await env.call_tool("list_files")
            assert len(server.leases()) == 1
    asyncio.run(run())
    assert wait_until(lambda: server.leases() == [])


def test_fifty_dropped_sessions_leak_nothing(server: Server) -> None:
    assert wait_until(lambda: server.leases() == [])
    before = server.held()

    async def drop(i: int) -> None:
        env = MCPToolClient(base_url=server.url)
        await env.connect()
        await env.reset(seed=i, task=i % 2)
        if i % 3 == 1:
            await env.call_tool("write_file", path="x.py", content="x = 1\n")
        elif i % 3 == 2:  # drop with a step in flight
            assert env._ws is not None
            await env._ws.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "run",
                                                                    "arguments": {"command": "sleep 0.3"}}}))
        assert env._ws is not None
        env._ws.transport.abort()  # no close frame: the connection just goes away

    async def run() -> None:
        for start in range(0, 50, 10):
            await asyncio.gather(*(drop(i) for i in range(start, start + 10)))
            assert len(server.leases()) <= 50

    asyncio.run(run())
    assert wait_until(lambda: server.leases() == [], timeout=60)
    assert wait_until(lambda: server.held() == before, timeout=30), (server.held(), before)
    assert server.proc.poll() is None


CRASHING_CLIENT = """
import asyncio, sys
from openenv.core.mcp_client import MCPToolClient

async def main():
    env = MCPToolClient(base_url=sys.argv[1])
    await env.connect()
    await env.reset(task="code/add")
    await env.call_tool("write_file", path="x.py", content="x = 1")
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_one_session_per_client_and_a_dead_clients_is_reclaimed_in_seconds(pack: Path,
                                                                          tmp_path: Path) -> None:
    """openenv 0.10's client (JSON-RPC over HTTP /mcp beside its WebSocket) held two sessions, and a crashed
    one's was held until the 600 s idle timeout, so `--max-sessions` refused the next client."""
    import subprocess
    import sys

    with serve(str(pack), "--max-sessions", "1", "--reclaim-after", "2", tmp=tmp_path) as srv:
        async def whole_episode() -> None:  # one session is all a client needs
            async with MCPToolClient(base_url=srv.url) as env:
                await env.reset(task="code/add")
                assert {t.name for t in await env.list_tools()} == set(TOOLS)
                assert "add.py" in await env.call_tool("list_files")  # the tool's text, over HTTP /mcp
                assert "unknown tool" in await env.call_tool("rm_rf")
                await env.call_tool("write_file", path="add.py", content=ADD_SOLUTION["add.py"])
                end = await env.step(CallToolAction(tool_name="submit", arguments={}))
                assert end.done and end.reward == 1.0
        asyncio.run(whole_episode())
        assert wait_until(lambda: srv.leases() == [])
        client = subprocess.Popen([sys.executable, "-c", CRASHING_CLIENT, srv.url], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert client.stdout is not None and client.stdout.readline().strip() == "ready"
            assert len(srv.leases()) == 1
        finally:
            client.kill()  # SIGKILL: no close, no goodbye
            client.wait()
        t0 = time.monotonic()
        assert wait_until(lambda: srv.leases() == [], timeout=30)
        reclaimed = time.monotonic() - t0

        async def next_client() -> str:
            async with MCPToolClient(base_url=srv.url) as env:
                return (await env.reset(task="code/add2")).observation.metadata["task"]
        assert asyncio.run(next_client()) == "code/add2"  # admitted under --max-sessions 1
        assert reclaimed < 15, reclaimed


def test_the_older_clients_wire_still_works(server: Server) -> None:
    """openenv-core 0.3's client: a WebSocket alone, tool calls as step messages."""
    from websockets.asyncio.client import connect

    async def run() -> None:
        async with connect(server.url.replace("http", "ws") + "/ws", proxy=None) as ws:
            async def send(msg: dict) -> dict:
                await ws.send(json.dumps(msg))
                return json.loads(await ws.recv())["data"]

            first = await send({"type": "reset", "data": {"task": "code/add"}})
            assert first["observation"]["metadata"]["task"] == "code/add"
            tools = await send({"type": "step", "data": {"type": "list_tools"}})
            assert {t["name"] for t in tools["observation"]["tools"]} == set(TOOLS)
            listed = await send({"type": "step", "data": {"type": "call_tool", "tool_name": "list_files",
                                                          "arguments": {}}})
            assert "add.py" in listed["observation"]["result"]
            end = await send({"type": "step", "data": {"type": "call_tool", "tool_name": "submit",
                                                       "arguments": {}}})
            assert end["done"] and end["reward"] == 0.0 and end["metadata"]["passed"] is False
    asyncio.run(run())
    assert wait_until(lambda: server.leases() == [])


def test_bearer_token_is_required_for_every_request(guarded: Server) -> None:
    assert httpx.get(guarded.url + "/health", timeout=5).status_code == 401
    assert httpx.get(guarded.url + "/health", headers={"Authorization": "Bearer wrong-token-xxxxxxx"},
                     timeout=5).status_code == 401
    assert httpx.get(guarded.url + "/schema", headers=guarded.headers, timeout=5).status_code == 200

    async def run() -> None:
        # openenv 0.10's client opens its session over HTTP /mcp first: refused there (401), and a WebSocket
        # upgrade without the token (the older client's way in) is refused too (403)
        with pytest.raises(httpx.HTTPStatusError, match="401"):
            await MCPToolClient(base_url=guarded.url).connect()
        with pytest.raises(httpx.HTTPStatusError, match="401"):
            await RlvrClient(guarded.url, token="not-the-token-at-all").connect()
        from websockets.asyncio.client import connect

        with pytest.raises(Exception, match="403"):
            await connect(guarded.url.replace("http", "ws") + "/ws", proxy=None)
        async with RlvrClient(guarded.url, token=TOKEN) as env:
            first = await env.reset(task="code/add")
            assert first.observation.metadata["task"] == "code/add"
    asyncio.run(run())


def test_idle_sessions_expire_and_give_their_sandbox_back(guarded: Server) -> None:
    async def run() -> None:
        async with RlvrClient(guarded.url, token=TOKEN) as env:
            await env.reset(task="code/add")
            assert len(guarded.leases()) == 1
            assert await asyncio.to_thread(wait_until, lambda: guarded.leases() == [], 30)
            late = await env.step(CallToolAction(tool_name="list_files", arguments={}))
            assert late.observation.error is not None and "expired" in late.observation.error.message
            with pytest.raises(RuntimeError, match="expired"):
                await env.reset(task="code/add")
            assert guarded.leases() == []
    asyncio.run(run())


def test_bad_serve_inputs_are_one_line_exit_2(cli, tmp_path: Path,
                                              pack: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli(["serve", "--tasks", "nosuchdomain"])
    assert r.code == 2 and "nosuchdomain" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = cli(["serve", "--tasks", str(pack), "--port", str(s.getsockname()[1])])
    assert r.code == 2 and "cannot listen" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    for content, why in ((None, "no such token file"), ("", "one token"), ("a b\n", "one token"),
                         ("short\n", "at least 16")):
        f = tmp_path / "tok"
        f.unlink(missing_ok=True)
        if content is not None:
            f.write_text(content)
        r = cli(["serve", "--tasks", str(pack), "--token-file", str(f)])
        assert r.code == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
