"""Runs inside the episode's sandbox: forwards 127.0.0.1 to the gateway's socket, then runs the agent command.

Standard library only (it runs on the agent's interpreter, whatever that has). The sandbox's job has no
network but its own loopback, so the gateway reaches it as a Unix socket mounted read-only beside this file; a
forwarder listening on 127.0.0.1 makes it an ordinary `OPENAI_BASE_URL` for any HTTP client. The agent runs as
`/bin/sh -c COMMAND` in its own process group, in the workspace, with OPENAI_BASE_URL, OPENAI_API_KEY,
ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, RLVR_PROMPT_FILE and RLVR_AGENT_DIR set (a preset's command may add
more, `rlvr.rollout.gateway.presets`); its stdout is the job's stdout (the final answer of answer tasks). A
thread polls the gateway's `/rlvr/stop`: when a budget runs out the agent's group is killed, and this exits 0.
Exit code: the agent's (a signal as 128 + its number).

    python launch.py EPISODE_DIR AGENT_DIR        (EPISODE_DIR holds gateway.sock, key, prompt.md, command)
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _forward(listener: socket.socket, path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(path)
        except OSError:
            conn.close()
            up.close()
            continue
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pump, args=(conn, up), daemon=True).start()
        threading.Thread(target=_pump, args=(up, conn), daemon=True).start()


def _poll_stop(path: str, key: str) -> str | None:
    """One long poll of the gateway's stop signal: the reason, or None (not yet)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    try:
        s.connect(path)
        s.sendall(f"GET /rlvr/stop HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\n"
                  "Connection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        return "gateway refused"
    return json.loads(body or b"{}").get("stop")


def _watch(path: str, key: str, proc: subprocess.Popen, stopped: list[str]) -> None:
    while proc.poll() is None:
        try:
            why = _poll_stop(path, key)
        except (OSError, ValueError):
            why = "gateway gone"
        if why and proc.poll() is None:
            stopped.append(why)
            sys.stderr.write(f"rlvr: agent stopped ({why})\n")
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            return


def main(argv: list[str]) -> int:
    episode, agent_dir = argv[1], argv[2]
    path = os.path.join(episode, "gateway.sock")
    with open(os.path.join(episode, "key"), encoding="utf-8") as f:
        key = f.read().strip()
    with open(os.path.join(episode, "command"), encoding="utf-8") as f:
        command = f.read()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    threading.Thread(target=_forward, args=(listener, path), daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, OPENAI_BASE_URL=base + "/v1", OPENAI_API_KEY=key,
               ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY=key,
               RLVR_PROMPT_FILE=os.path.join(episode, "prompt.md"), RLVR_AGENT_DIR=agent_dir,
               PYTHONPATH=agent_dir, NO_PROXY="*", no_proxy="*")
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=os.getcwd(), env=env, start_new_session=True)
    except OSError as exc:
        sys.stderr.write(f"rlvr: cannot start the agent: {exc}\n")
        return 127
    stopped: list[str] = []
    threading.Thread(target=_watch, args=(path, key, proc, stopped), daemon=True).start()
    code = proc.wait()
    if stopped:
        return 0
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
