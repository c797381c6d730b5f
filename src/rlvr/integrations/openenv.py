"""rlvr's multi-turn Env as an OpenEnv server (`rlvr serve`), built on the `openenv` package's own server.

    rlvr serve --tasks code:20 --port 8000 [--token-file F]

    async with RlvrClient("http://127.0.0.1:8000", token=...) as env:      # openenv's MCPToolClient
        first = await env.reset(seed=0, task="code/easy-multi-s0-3")     # or task=INDEX, or no task: seed
        picks tools = await env.list_tools()                              # JSON-RPC over HTTP /mcp
        await env.call_tool("write_file", path="solution.py", content="...")
        end = await env.step(CallToolAction(tool_name="submit", arguments={}))
        end.reward, end.observation.metadata["passed"], end.observation.metadata["checks"]

A session holds one `RlvrEnvironment`, whose reset leases a fresh sandbox for the episode. openenv 0.10's
client opens it with a JSON-RPC `openenv/session/create` on HTTP `/mcp`, attaches its WebSocket
(`/ws?session_id=`) for reset and step, and sends `tools/list` and `tools/call` as JSON-RPC over HTTP `/mcp`
to the same session: one session per client. The older client (openenv-core 0.3) opens a session with its
WebSocket alone and sends tool calls as step messages; it keeps working. rlvr's tools are OpenEnv MCP tool
actions; the step that ends the episode (submit, or a budget running out) carries the reward and the verdict
(score, passed, checks, flags) in the observation's metadata. The reward comes from the runtime's one Scorer.

Leases never outlive their client. A session a WebSocket opened is closed when the socket closes or drops; one
opened over HTTP lives while its client's WebSocket is attached, and is reclaimed `reclaim_after` seconds
after it detaches (or, never attached, after it was last used) unless the client comes back: a crashed
client's connection closes at once, a silent one is dropped by the WebSocket's ping (uvicorn's heartbeat, 20
s), so its sandbox is back within seconds, not at `idle_timeout`. openenv's reaper also closes sessions idle
for `idle_timeout` seconds; a closed environment refuses to lease again. A malformed action is answered in the
protocol's own error format (a `VALIDATION_ERROR` message, or a `ToolError` in the observation) and the
session lives on.

Unlike a plain `create_app`, the stateless HTTP `/reset` and `/step` routes are not registered (production
mode): a sandboxed episode lives in a session. With a token every HTTP request and WebSocket upgrade must
carry `Authorization: Bearer TOKEN` (`RlvrClient(token=...)` sends it; openenv's client takes `headers=`)."""
from __future__ import annotations

import asyncio
import contextvars
import functools
import hmac
import ipaddress
import socket
import subprocess
import sys
import time
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
DEFAULT_RECLAIM_S = 5.0
"""Seconds a session opened over HTTP outlives its client's WebSocket (or, never attached, its last use)."""

_OVER_HTTP: contextvars.ContextVar[bool] = contextvars.ContextVar("rlvr_serve_over_http", default=False)
"""Set by `Gate` while an HTTP request (not a WebSocket) is handled: the sessions it creates are the 0.10
client's `openenv/session/create`."""


class RlvrObservation(Observation):
    """The first observation of an episode: metadata holds task, prompt, messages and tools."""


class RlvrToolObservation(CallToolObservation):
    """The result of one tool call; at the end of the episode metadata holds the verdict."""

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """Also `data`: what openenv's `MCPToolClient.call_tool` returns of a JSON-RPC `tools/call` (the
        tool's text, or the error as text the model reads), where the WebSocket path returns `result`."""
        out = super().model_dump(**kwargs)
        out["data"] = self.result if self.error is None else f"error: {self.error.message}"
        return out


class RlvrToolList(ListToolsObservation):
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

    def __init__(self, app: Any, token: str | None = None, server: RlvrEnvServer | None = None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None
        self.server = server

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
            token = _OVER_HTTP.set(scope["type"] == "http")
            try:
                return await self.app(scope, receive, send)
            finally:
                _OVER_HTTP.reset(token)
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except (WebSocketDisconnect, OSError):
            pass
        except RuntimeError as exc:  # starlette's "Cannot call send once a close message has been sent"
            if "close message" not in str(exc) and "disconnect" not in str(exc).lower():
                raise
        finally:
            if self.server is not None:  # an attached socket ended: its session's grace starts now
                from urllib.parse import parse_qs

                query = parse_qs(scope.get("query_string", b"").decode())
                for session_id in query.get("session_id", []):
                    self.server.detached(session_id)


class RlvrEnvServer(HTTPEnvServer):
    """openenv's server, whose sessions opened over HTTP (`openenv/session/create`) are reclaimed
    `reclaim_after` seconds after their client's WebSocket detaches, or after their last use when none is
    attached (see the module docstring): openenv alone keeps them until `idle_timeout`, and an attached one
    for ever."""

    def __init__(self, *args: Any, reclaim_after: float = DEFAULT_RECLAIM_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reclaim_after = reclaim_after
        self._over_http: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def _create_session(self) -> tuple[str, Environment]:
        session_id, env = await super()._create_session()
        if _OVER_HTTP.get():
            self._over_http.add(session_id)
        return session_id, env

    def detached(self, session_id: str) -> None:
        """A WebSocket attached to `session_id` ended: the session's grace starts now."""
        self._update_session_activity(session_id)

    def expired(self, now: float) -> list[str]:
        """Sessions opened over HTTP that are to go: with no WebSocket attached and unused for `reclaim_after`
        seconds, or unused for `idle_timeout` even with one attached (openenv's reaper spares those)."""
        out = []
        idle_timeout = self._session_idle_timeout_s
        for session_id in list(self._over_http):
            info = self._session_info.get(session_id)
            if session_id not in self._sessions:  # closed by its client (openenv/session/close)
                self._over_http.discard(session_id)
                continue
            if info is None:  # still being made
                continue
            idle = now - info.last_activity_at
            attached = session_id in self._session_websocket_attachments
            if ((not attached and idle > self.reclaim_after)
                    or (idle_timeout is not None and idle > idle_timeout)):
                out.append(session_id)
        return out

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.reclaim_after / 2))
            for session_id in self.expired(time.time()):
                self._over_http.discard(session_id)
                await self._destroy_session(session_id)

    def _start_reaper(self) -> None:
        super()._start_reaper()
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep())

    def _stop_reaper(self) -> None:
        super()._stop_reaper()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None


def create_app(runtime: Runtime, *, token: str | None = None, max_sessions: int = 64,
               idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S,
               reclaim_after: float = DEFAULT_RECLAIM_S) -> Any:
    """The ASGI app: openenv's FastAPI routes (sessions over WebSocket and HTTP `/mcp`, health, schema,
    metadata) over `RlvrEnvironment`, behind `Gate` (the bearer token, when one is given)."""
    from fastapi import FastAPI

    server = RlvrEnvServer(functools.partial(RlvrEnvironment, runtime), CallToolAction, RlvrToolObservation,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                session_timeout=idle_timeout),
                           reclaim_after=reclaim_after)
    app = FastAPI(title="rlvr OpenEnv server", version=_version())
    server.register_routes(app, mode=ServerMode.PRODUCTION)
    app.state.openenv = server
    return Gate(app, token, server)


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
          reclaim_after: float = DEFAULT_RECLAIM_S, config: RunConfig | None = None) -> None:
    """`rlvr serve`: check every input, then serve until interrupted (the pool is closed on the way out). A
    run `config` gives the tasks its `[tasks.domains]` settings and the sessions its sandbox, cluster and
    Scorer."""
    import uvicorn

    from rlvr.integrations.session import resolve_tasks

    token = read_token(token_file) if token_file else None
    if max_sessions < 1 or idle_timeout <= 0 or reclaim_after <= 0:
        raise UserError("--max-sessions, --idle-timeout and --reclaim-after must be positive",
                        fix="e.g. --max-sessions 64")
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
        app = create_app(runtime, token=token, max_sessions=max_sessions, idle_timeout=idle_timeout,
                         reclaim_after=reclaim_after)
        print(f"rlvr serve: {len(resolved)} tasks on ws://{host}:{port}/ws"
              + (" (bearer token required)" if token else ""), file=sys.stderr, flush=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", ws_max_size=16 << 20)


class RlvrClient(MCPToolClient):
    """openenv's MCPToolClient, with the bearer token (when one is given) on every HTTP request and the
    WebSocket upgrade."""

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        headers = {**(kwargs.pop("headers", None) or {}),
                   **({"Authorization": f"Bearer {token}"} if token else {})}
        super().__init__(base_url, headers=headers or None, **kwargs)


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
