"""Network access for the jobs of a pool that allows it: a user-mode network (slirp4netns) in each worker's
network namespace.

Without it a job's network namespace holds only a loopback device. With it, the worker's namespace gets a tap
device behind slirp4netns, a user-mode NAT run on the host for that worker alone, with the host's loopback
refused (`--disable-host-loopback`: 10.0.2.2 does not reach the host's 127.0.0.1), and slirp4netns itself in
its own sandbox and seccomp filter. DNS is its forwarder at 10.0.2.3 (the worker's resolv.conf). What a job
can reach is what the host can reach, its loopback excepted: docs/SECURITY.md says what that means.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

from rlvr.errors import SandboxUnavailable

CHECK_FIX = "run `rlvr sandbox check`"
READY_TIMEOUT_S = 20.0
"""Limit of bubblewrap's report of the worker's PID and of slirp4netns's ready signal."""


def read_child_pid(fd: int, timeout_s: float = READY_TIMEOUT_S) -> int:
    """The host PID of the worker's first process, from bubblewrap's `--info-fd` JSON."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"}" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise SandboxUnavailable("bubblewrap did not report the worker's PID", fix=CHECK_FIX)
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        return int(json.loads(data[: data.index(b"}") + 1])["child-pid"])
    except (ValueError, KeyError):
        raise SandboxUnavailable(f"bubblewrap reported no PID ({data[:80]!r})", fix=CHECK_FIX) from None


def attach(pid: int, log: Path) -> subprocess.Popen[bytes]:
    """Start slirp4netns for the network namespace of `pid` and wait until the tap device is configured."""
    slirp = shutil.which("slirp4netns")
    if slirp is None:
        raise SandboxUnavailable("slirp4netns is not installed: jobs with network access need it",
                                 fix="apt-get install -y slirp4netns (or `make images`)")
    ready_r, ready_w = os.pipe()
    try:
        with open(log, "ab") as out:
            argv = [slirp, "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
                    "--enable-seccomp", f"--ready-fd={ready_w}", str(pid), "tap0"]
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    pass_fds=(ready_w,), start_new_session=True)
        os.close(ready_w)
        ready_w = -1
        if not select.select([ready_r], [], [], READY_TIMEOUT_S)[0] or os.read(ready_r, 16) != b"1":
            proc.kill()
            proc.wait()
            tail = log.read_text(errors="replace")[-300:] if log.exists() else ""
            why = " ".join(tail.split())
            raise SandboxUnavailable(f"slirp4netns did not configure the worker's network: {why}",
                                     fix="check /dev/net/tun and `slirp4netns --version`")
        return proc
    finally:
        os.close(ready_r)
        if ready_w >= 0:
            os.close(ready_w)


def detach(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop a worker's slirp4netns."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
