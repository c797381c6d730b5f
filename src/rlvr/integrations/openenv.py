"""rlvr's multi-turn Env as an OpenEnv server (`rlvr serve`), built on openenv-core's own server classes.

    rlvr serve --tasks code:20 --port 8000 [--token-file F]

    async with RlvrClient("http://127.0.0.1:8000", token=...) as env:      # openenv-core's MCPToolClient
        first = await env.reset(seed=0, task="code/easy-multi-s0-3")     # or task=INDEX, or no task: seed
        picks tools = await env.list_tools()
        await env.call_tool("write_file", path="solution.py", content="...")
        end = await env.step(CallToolAction(tool_name="submit", arguments={}))
        end.reward, end.observation.metadata["passed"], end.observation.metadata["checks"]

A session is OpenEnv's stateful WebSocket route (`/ws`): each connection gets its own `RlvrEnvironment`, whose
reset leases a fresh sandbox for the episode; rlvr's tools are OpenEnv MCP tool actions (`list_tools`,
`call_tool`); the step that ends the episode (submit, or a budget running out) carries the reward and the
verdict (score, passed, checks, flags) in the observation's metadata. The reward comes from the runtime's one
Scorer.

Leases never outlive their session: openenv-core's server closes a session's environment when the socket
closes or drops, and its reaper closes sessions idle for `idle_timeout` seconds; a closed environment refuses
to lease again. A malformed action is answered in the protocol's own error format (a `VALIDATION_ERROR`
message, or a `ToolError` in the observation) and the session lives on.

Two things differ from a plain `create_app`: openenv-core 0.3.0's `serialize_observation` leaves `metadata`
out of the observation it sends while its client reads it from there, so rlvr's observations keep it
(`_KeepsMetadata`); and the stateless HTTP `/reset` and `/step` routes are not registered (production mode): a
sandboxed episode lives in a session. With a token every HTTP request and WebSocket upgrade must carry
`Authorization: Bearer TOKEN`; openenv-core's client sends no headers, so `RlvrClient` adds it.
"""
from __future__ import annotations

import functools
import hmac
import ipaddress
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    ServerMode,
    State,
)
from openenv.core.mcp_client import MCPToolClient

from rlvr.config import RunConfig
from rlvr.envs.tools import tools_for
from rlvr.errors import UserError
from rlvr.integrations.session import Runtime, tool_specs, verdict_metadata

DEFAULT_IDLE_TIMEOUT_S = 600.0
"""Seconds a session may sit idle before its environment is closed and its sandbox given back."""


class _KeepsMetadata:
    """Keeps `metadata` in the dumped observation when openenv-core's serializer excludes it (see the module
    docstring): its client reads `observation.metadata`, where the verdict travels."""

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        out = super().model_dump(**kwargs)  # type: ignore[misc]
        exclude = kwargs.get("exclude")
        if exclude is not None and "metadata" in exclude:
            metadata = super().model_dump(mode="json", include={"metadata"})  # type: ignore[misc]
            out["metadata"] = metadata["metadata"]
        return out


class RlvrObservation(_KeepsMetadata, Observation):
    """The first observation of an episode: metadata holds task, prompt, messages and tools."""


class RlvrToolObservation(_KeepsMetadata, CallToolObservation):
    """The result of one tool call; at the end of the episode metadata holds the verdict."""


class RlvrToolList(_KeepsMetadata, ListToolsObservation):
    """The tools of the current task."""


def _tools(specs: list[dict[str, Any]]) -> list[Tool]:
    return [Tool(name=s["function"]["name"], description=s["function"]["description"],
                 input_schema=s["function"]["parameters"]) for s in specs]


class RlvrEnvironment(Environment):
    """One OpenEnv session over rlvr's Env: reset leases a sandbox; tool calls act in it; the end is
    scored."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.session = runtime.session()
        self.closed = False
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | int | None = None,
              **kwargs: Any) -> Observation:
        if self.closed:
            raise RuntimeError("this session has expired (idle too long); open a new connection")
        if kwargs:
            raise ValueError(f"unknown reset argument {min(kwargs)!r}: reset takes seed, episode_id, task")
        chosen = self.runtime.task(task, seed or 0)
        messages = self.session.start(chosen, seed or 0)
        self._state = State(episode_id=episode_id, step_count=0, task=chosen.key)  # type: ignore[call-arg]
        return RlvrObservation(metadata={
            "task": chosen.key, "prompt": chosen.prompt, "multi_turn": chosen.multi_turn,
            "messages": [m.model_dump(mode="json", exclude_defaults=True) for m in messages],
            "tools": tool_specs(chosen)})

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, ListToolsAction):
            task = self.session.task
            specs = tool_specs(task) if task is not None else [t.spec() for t in tools_for(None).values()]
            return RlvrToolList(tools=_tools(specs))
        if not isinstance(action, CallToolAction):
            raise TypeError(f"unsupported action {type(action).__name__}: send list_tools or call_tool")
        name = action.tool_name
        if self.closed or self.session.task is None:
            why = "this session has expired; open a new connection" if self.closed else "call reset first"
            return RlvrToolObservation(tool_name=name,
                                       error=ToolError(error_type=ToolErrorType.EXECUTION_ERROR,
                                                                        message=why))
        offered = {s["function"]["name"] for s in tool_specs(self.session.task)}
        if name not in offered:
            return RlvrToolObservation(tool_name=name, error=ToolError(
                error_type=ToolErrorType.TOOL_NOT_FOUND,
                message=f"unknown tool {name!r}; tools: {', '.join(sorted(offered))}"))
        self._state.step_count += 1
        text, done = self.session.call(name, action.arguments)
        if not done:
            return RlvrToolObservation(tool_name=name, result=text)
        scored = self.session.finish()
        return RlvrToolObservation(tool_name=name, result=text, done=True, reward=scored.reward,
                                   metadata={**verdict_metadata(scored),
                                             "truncated_by": self.session.truncated_by})

    @property
    def state(self) -> State:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="rlvr", version=_version(),
                                   description=f"rlvr tasks ({len(self.runtime.tasks)}) in "
                                               f"isolated sandboxes")

    def close(self) -> None:
        """Give the sandbox back; the session can no longer lease one (idempotent)."""
        self.closed = True
        self.session.close()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlvr")
    except PackageNotFoundError:  # a source checkout without metadata
        return "0"


class Gate:
    """ASGI middleware in front of openenv-core's routes.

    With a token, every HTTP request and WebSocket upgrade must carry `Authorization: Bearer TOKEN` (compared
    in constant time); others get 401 (HTTP) or a refused upgrade (403). And a client that drops while its
    step runs makes openenv-core's handler fail to send the reply (the session is still closed and its lease
    released by the handler's `finally`); that failure is the client's disconnect, not a server error, so it
    is not logged as one.
    """

    def __init__(self, app: Any, token: str | None = None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.expected is not None and scope["type"] in ("http", "websocket"):
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b'{"detail":"missing or wrong bearer token"}'})
                return
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except (WebSocketDisconnect, OSError):
            pass
        except RuntimeError as exc:  # starlette's "Cannot call send once a close message has been sent"
            if "close message" not in str(exc) and "disconnect" not in str(exc).lower():
                raise


def create_app(runtime: Runtime, *, token: str | None = None, max_sessions: int = 64,
               idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S) -> Any:
    """The ASGI app: openenv-core's FastAPI routes (WebSocket sessions, health, schema, metadata) over
    `RlvrEnvironment`, behind `Gate` (the bearer token, when one is given)."""
    from fastapi import FastAPI

    server = HTTPEnvServer(functools.partial(RlvrEnvironment, runtime), CallToolAction, RlvrToolObservation,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                session_timeout=idle_timeout))
    app = FastAPI(title="rlvr OpenEnv server", version=_version())
    server.register_routes(app, mode=ServerMode.PRODUCTION)
    app.state.openenv = server
    return Gate(app, token)


def read_token(path: str | Path) -> str:
    """The bearer token in a file (one line, surrounding whitespace ignored); bad files raise UserError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("no such token file", file=p,
                        fix="write the token into it (e.g. openssl rand -hex 32)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the token file: {exc}", file=p,
                        fix="give a readable UTF-8 text file") from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != 1 or any(c.isspace() for c in lines[0]):
        raise UserError("the token file must hold one token on one line", file=p, fix="write only the token")
    if len(lines[0]) < 16:
        raise UserError(f"the token is {len(lines[0])} characters; at least 16 are needed", file=p,
                        fix="use a long random token, e.g. openssl rand -hex 32")
    return lines[0]


def check_port(host: str, port: int) -> None:
    """Raise UserError when `host:port` cannot be bound (in use, or not an address of this machine)."""
    if not 0 < port < 65536:
        raise UserError(f"port {port} is out of range", field="--port", fix="give 1..65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--port",
                            fix="pick a free port (or stop what holds it)") from None


def serve(tasks: str, *, host: str = "127.0.0.1", port: int = 8000, token_file: str | None = None,
          max_sessions: int = 64, idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
          config: RunConfig | None = None) -> None:
    """`rlvr serve`: check every input, then serve until interrupted (the pool is closed on the way out). A
    run `config` gives the tasks its `[tasks.domains]` settings and the sessions its sandbox, cluster and
    Scorer."""
    import uvicorn

    from rlvr.integrations.session import resolve_tasks

    token = read_token(token_file) if token_file else None
    if max_sessions < 1 or idle_timeout <= 0:
        raise UserError("--max-sessions and --idle-timeout must be positive", fix="e.g. --max-sessions 64")
    check_port(host, port)
    resolved = resolve_tasks(tasks, settings=config.tasks.domains if config is not None else None)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and token is None:
        print(f"warning: serving on {host} without --token-file: anyone who can reach it can run code in the "
              "sandboxes", file=sys.stderr)
    with Runtime(resolved, config=config) as runtime:
        _ = runtime.scorer  # start the pool and the Scorer before the first session
        app = create_app(runtime, token=token, max_sessions=max_sessions, idle_timeout=idle_timeout)
        print(f"rlvr serve: {len(resolved)} tasks on ws://{host}:{port}/ws"
              + (" (bearer token required)" if token else ""), file=sys.stderr, flush=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", ws_max_size=16 << 20)


class RlvrClient(MCPToolClient):
    """openenv-core's MCPToolClient, plus the bearer token on the WebSocket upgrade when one is given."""

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._token = token

    async def connect(self) -> RlvrClient:
        if self._ws is not None:
            return self
        from websockets.asyncio.client import connect as ws_connect

        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            self._ws = await ws_connect(self._ws_url, open_timeout=self._connect_timeout,
                                        max_size=self._max_message_size,
                                        additional_headers=headers, proxy=None)
        except Exception as exc:
            raise ConnectionError(f"Failed to connect to {self._ws_url}: {exc}") from exc
        return self


@contextmanager
def launched(tasks: str, *args: str, port: int | None = None, token: str | None = None,
             log: IO[str] | None = None, timeout: float = 120.0) -> Iterator[tuple[subprocess.Popen, str]]:
    """Run `rlvr serve --tasks TASKS ARGS` as a child process on 127.0.0.1 (a free port unless given) and wait
    until `/health` answers; yields (process, base URL) and stops the server on the way out. `token` is sent
    with the health checks (pass `--token-file` in `args`); `log` takes the server's output (default: dropped;
    never a pipe, whose filling would block the server)."""
    import os
    import time

    import httpx

    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "rlvr.cli", "serve", "--tasks", tasks, "--port", str(port), *args]
    out = log if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"rlvr serve exited with {proc.returncode} before answering")
            try:
                if httpx.get(url + "/health", headers=headers, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"rlvr serve did not answer within {timeout:.0f} s")
            time.sleep(0.2)
        yield proc, url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
