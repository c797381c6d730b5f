"""The gateway's HTTP side: a small threaded HTTP/1.1 server (standard library) on loopback TCP or a Unix
socket.

    gw = Gateway(policy, sampling)
    with serve(gw) as server:                       # http://127.0.0.1:PORT/v1, every session's key
        client = openai.OpenAI(base_url=server.base_url, api_key=gw.open_session().key)
    with serve_unix(gw, path, only=session.key):   # one episode's socket: that episode's key only

TCP binds 127.0.0.1 only. A Unix listener made for one episode (`only=`) refuses every other key, so an agent
that learned another episode's key still cannot reach that episode through its own socket. Connections are
kept alive; each response is written in one piece with TCP_NODELAY (no Nagle stalls on small bodies), and a
streamed one as chunked server-sent events, each event as it is made.
"""
from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from typing_extensions import Self

from rlvr.rollout.gateway import anthropic
from rlvr.rollout.gateway.convert import ApiError, openai_error
from rlvr.rollout.gateway.core import Gateway, Response

MAX_BODY = 64 << 20
"""Largest request body accepted (bytes)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "rlvr-gateway"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        gw: Gateway = self.server.gateway  # type: ignore[attr-defined]
        error = anthropic.error_body if self.path.startswith("/v1/messages") else openai_error
        try:
            body = self._body() if method == "POST" else None
            resp = gw.handle(method, self.path, dict(self.headers.items()), body,
                             only=self.server.only)  # type: ignore[attr-defined]
        except ApiError as exc:
            resp = Response(exc.status, error(exc))
        except Exception as exc:  # noqa: BLE001 (a bug below must still answer in the API's error format)
            resp = Response(500, error(ApiError(500, f"internal gateway error: {type(exc).__name__}: {exc}",
                                                type="server_error")))
        try:
            if resp.events is not None:
                self._send_events(resp)
            else:
                self._send_json(resp.status, resp.body or {})
        except (BrokenPipeError, ConnectionResetError):  # the agent went away (it was stopped, say)
            self.close_connection = True
        finally:
            close = getattr(resp.events, "close", None)
            if close is not None:
                close()  # a stream cut short still records its turn

    def _body(self) -> Any:
        try:
            n = int(self.headers.get("content-length") or 0)
        except ValueError:
            raise ApiError(400, "bad Content-Length header") from None
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, f"request body of {n} bytes is over the gateway's {MAX_BODY} bytes")
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the request body is not valid JSON ({exc})") from None

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\nContent-Type: "
                f"application/json\r\n"
                f"Content-Length: {len(data)}\r\n")
        if self.close_connection:
            head += "Connection: close\r\n"
        self.wfile.write(head.encode() + b"\r\n" + data)

    def _send_events(self, resp: Response) -> None:
        """Server-sent events, each written as soon as it is made (a token as it is sampled); events the
        caller may read before the turn ends."""
        head = (f"HTTP/1.1 {resp.status} OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                "Transfer-Encoding: chunked\r\n\r\n")
        self.wfile.write(head.encode())
        for name, data in resp.events or ():
            line = b"data: " + json.dumps(data).encode()
            if name:
                line = b"event: " + name.encode() + b"\n" + line
            self.wfile.write(_chunk(line + b"\n\n"))
        self.wfile.write((_chunk(b"data: [DONE]\n\n") if resp.done_marker else b"") + b"0\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class _Serving:
    """A started server on its own thread; `close()` (or leaving the `with`) stops it."""

    server: socketserver.BaseServer

    def __init__(self, server: Any, gateway: Gateway, only: str | None) -> None:
        server.gateway, server.only, server.daemon_threads = gateway, only, True
        self.server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="rlvr-gateway-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TcpServer(_Serving):
    """The gateway on loopback TCP."""

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])  # type: ignore[attr-defined, index]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


class _TcpHTTPServer(ThreadingHTTPServer):
    def server_bind(self) -> None:  # HTTPServer's would look the host name up (a DNS query, slow offline)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", int(self.server_address[1])


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = False


class UnixServer(_Serving):
    """The gateway on a Unix socket (made world-writable: the sandboxed agent runs as another user)."""

    def __init__(self, path: str, gateway: Gateway, only: str | None) -> None:
        self.path = path
        server = _UnixHTTPServer(path, _Handler)
        os.chmod(path, 0o666)
        super().__init__(server, gateway, only)

    def close(self) -> None:
        super().close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def serve(gateway: Gateway, port: int = 0, *, only: str | None = None) -> TcpServer:
    """Serve `gateway` on 127.0.0.1:`port` (0: a free port), in a background thread."""
    return TcpServer(_TcpHTTPServer(("127.0.0.1", port), _Handler), gateway, only)


def serve_unix(gateway: Gateway, path: str, *, only: str | None = None) -> UnixServer:
    """Serve `gateway` on the Unix socket `path` (limited to the key `only`, when given)."""
    return UnixServer(path, gateway, only)
