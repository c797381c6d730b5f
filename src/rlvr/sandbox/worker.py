"""One worker of the isolated pool, seen from the host: its bubblewrap process, the job frames it is sent and
answers, and how its answer and its cgroup's accounting become an ExecResult."""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import cgroups, network
from rlvr.sandbox.container import Container
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.sandbox.wire import recv_frame, send_frame

START_TIMEOUT_S = 60.0
"""Seconds a new worker may take to report ready."""
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-sandbox-spawner")
"""The one long-lived thread every worker is forked from. bubblewrap's --die-with-parent is the kernel's
parent-death signal, which follows the thread that forked, not the process: a worker started on a short-lived
thread (a rollout's tool thread starting an image pool, or replacing a lost worker) was killed when that
thread ended, and the next job waited for a new one."""


class WorkerLost(Exception):
    """The worker died, hung or spoke garbage: an infrastructure fault, not the program's."""


class Worker:
    """Host handle of one bubblewrap container running the zygote."""

    def __init__(self, wid: int, container: Container, cg: cgroups.WorkerCgroup, log: Path) -> None:
        self.wid = wid
        self.cg = cg
        self.log = log
        # the lean template's request pipe (see zygote._fork_lean); without warm modules one template serves
        # all
        warm = bool(container.warm)
        self.lean_rfd, self.lean_wfd = os.pipe() if warm else (-1, -1)
        info_r, info_w = os.pipe() if container.network else (-1, -1)  # bwrap reports the worker's PID there
        self.slirp: subprocess.Popen[bytes] | None = None
        try:
            with open(self.log, "wb") as out:
                self.proc = _SPAWNER.submit(
                    subprocess.Popen, container.argv(cg, self.lean_rfd, info_w), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=out, env={"PATH": "/usr/bin:/bin"}, close_fds=True,
                    pass_fds=[fd for fd in (self.lean_rfd, info_w) if fd >= 0]).result()
        finally:
            for fd in (self.lean_rfd, info_w):
                if fd >= 0:
                    os.close(fd)
        self.rfd, self.wfd = self.proc.stdout.fileno(), self.proc.stdin.fileno()  # type: ignore[union-attr]
        if self.lean_wfd < 0:
            self.lean_wfd = self.wfd
        if info_r >= 0:
            try:
                self.slirp = network.attach(network.read_child_pid(info_r), self.log.with_suffix(".net.log"))
            except BaseException:
                self.kill()
                raise
            finally:
                os.close(info_r)

    def wait_ready(self) -> None:
        try:
            header, _ = recv_frame(self.rfd, time.monotonic() + START_TIMEOUT_S)
        except (EOFError, TimeoutError, ValueError) as exc:
            tail = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
            self.kill()
            raise SandboxUnavailable(f"sandbox worker failed to start: {exc}: {' '.join(tail.split())}",
                                     fix="run `rlvr sandbox check`") from None
        if not header.get("ready"):
            self.kill()
            raise SandboxUnavailable("sandbox worker sent no ready signal", fix="run `rlvr sandbox check`")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, header: dict, stdin: bytes, deadline: float, warm: bool) -> tuple[dict, list[bytes]]:
        """Send a job to the warm or the lean template and wait for its result frame."""
        try:
            send_frame(self.wfd if warm else self.lean_wfd, header, stdin)
            reply, blobs = recv_frame(self.rfd, deadline)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            raise WorkerLost(f"{type(exc).__name__}: {exc}") from None
        if "error" in reply:
            raise WorkerLost(reply["error"])
        return reply, blobs

    def kill(self) -> None:
        network.detach(self.slirp)
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        if self.lean_wfd != self.wfd:
            try:
                os.close(self.lean_wfd)
            except OSError:
                pass
            self.lean_wfd = self.wfd
        self.cg.destroy()
        self.log.unlink(missing_ok=True)
        self.log.with_suffix(".net.log").unlink(missing_ok=True)


_STATUS_RULES: list[tuple[ExecStatus, Callable[[dict, cgroups.JobUsage], bool]]] = [
    (ExecStatus.memory_limit, lambda r, u: u.oom_killed),
    (ExecStatus.process_limit, lambda r, u: u.pids_hit),
    (ExecStatus.output_limit, lambda r, u: r["output_exceeded"]),
    (ExecStatus.file_limit, lambda r, u: r["signal"] == 25 or (r["exit_code"] != 0 and (
        r.get("workspace_full") or r.get("file_at_cap") or not r.get("workspace_copied", True)))),
    (ExecStatus.timeout, lambda r, u: r["timed_out"] or r["signal"] == 24),
    (ExecStatus.ok, lambda r, u: r["exit_code"] == 0),
]
"""First matching rule wins (SIGXFSZ is 25, SIGXCPU is 24); otherwise exit_nonzero."""


def job_result(reply: dict, blobs: list[bytes], usage: cgroups.JobUsage, limits: ExecLimits, wall: float,
               attempts: int) -> ExecResult:
    """The ExecResult of one job: the zygote's reply and blobs (stdout, stderr, channel), and the cgroup's
    usage."""
    out, err, chan = (blobs + [b"", b"", b""])[:3]
    status = next((s for s, rule in _STATUS_RULES if rule(reply, usage)), ExecStatus.exit_nonzero)
    return ExecResult(
        status=status, exit_code=reply["exit_code"], signal=reply["signal"],
        stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
        stdout_truncated=reply["stdout_total"] > limits.output_bytes,
        stderr_truncated=reply["stderr_total"] > limits.output_bytes,
        wall_s=wall, cpu_s=usage.cpu_s, peak_memory_mb=usage.peak_memory_mb, attempts=attempts,
        channel=chan.decode("utf-8", "replace"), error=reply.get("spawn_error") or None,
    )
