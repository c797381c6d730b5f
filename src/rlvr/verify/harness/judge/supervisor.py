"""Trusted supervisor: forks the pytest worker, relays its messages and signs the one result line it prints.

A standalone script (stdlib only, plus pytest pre-imported for the worker when the run has hidden tests) copied
from the pristine package into the sandbox and run as `python judge/_rlvr_supervisor.py`. Its stdin carries two lines: the config, then
a per-verification key. The worker is forked before the key is read, so the key never exists in the worker's
memory; the worker gets neither stdin nor this process's stdout, so it cannot sign a forged result. This
process never imports candidate code. The worker's output goes to a capped file, and its whole process group
is killed at the deadline or when it ends.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import signal
import sys
import time

MARK = "RLVR-RESULT"
MAX_MESSAGES_BYTES = 8 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def _undumpable() -> None:
    """Keep same-user processes out of this one's memory and descriptors (best effort, Linux)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _read_line() -> bytes:
    """One line of stdin, read byte by byte so that nothing after it is buffered in this process."""
    out = bytearray()
    while True:
        b = os.read(0, 1)
        if not b or b == b"\n":
            return bytes(out)
        out += b


def _fork_worker(config: dict, out_path: str) -> tuple[int, int]:
    """(pid, read end of the report pipe) of a forked worker in its own session."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: no stdin, output to a file, only the report pipe kept
        try:
            os.setsid()
            os.close(r)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.closerange(3, w)
            os.closerange(w + 1, 4096)
            sys.stdin = open(0, closefd=False)  # noqa: SIM115
            sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
            os.chdir(config["cand"])
            import _rlvr_worker

            _rlvr_worker.main(w, config)
        finally:
            os._exit(70)
    os.close(w)
    return pid, r


def _read_messages(fd: int, pid: int, deadline: float) -> tuple[list[dict], bool, int, int | None]:
    """JSON-line messages until EOF or the deadline; (messages, timed_out, malformed lines, wait status)."""
    buf, messages, total, bad = b"", [], 0, 0
    timed_out, status = False, None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if not ready:
            if status is None:
                done, st = os.waitpid(pid, os.WNOHANG)
                status = st if done else None
            if status is not None and not select.select([fd], [], [], 0)[0]:
                break  # the worker is gone and nobody else holds the pipe's data
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        total += len(chunk)
        if total > MAX_MESSAGES_BYTES:
            bad += 1
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(msg, dict):
                messages.append(msg)
            else:
                bad += 1
    return messages, timed_out, bad, status


def main() -> None:
    sys.path[:] = [HERE] + [p for p in sys.path if p not in ("", ".", os.getcwd(), HERE)]
    config = json.loads(_read_line())
    config["cand"] = os.path.abspath(config["cand"])
    config["judge"] = os.path.abspath(config["judge"])
    _undumpable()
    if config["tests"]:
        import pytest  # noqa: F401  (imported once here, before the fork, so the worker starts warm)

    out_path = os.path.join(config["judge"], "_rlvr_worker.out")
    t0 = time.monotonic()
    pid, r = _fork_worker(config, out_path)
    key = bytes.fromhex(_read_line().decode().strip())
    messages, timed_out, bad, status = _read_messages(r, pid, t0 + float(config["timeout"]))
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if status is None:
        _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        with open(out_path, "rb") as f:
            f.seek(max(0, os.path.getsize(out_path) - 4000))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        tail = ""
    payload = json.dumps({"messages": messages, "timed_out": timed_out, "malformed": bad,
                          "exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None,
                          "output_tail": tail, "wall_s": time.monotonic() - t0}, separators=(",", ":"))
    mac = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
    sys.stdout.write(f"{MARK} {mac} {payload}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
