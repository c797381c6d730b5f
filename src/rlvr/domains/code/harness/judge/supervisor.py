"""Trusted supervisor: forks the pytest worker, relays its messages and signs the one result line it prints.

A standalone script (stdlib only, plus pytest pre-imported for the worker when the run has hidden tests)
copied from the pristine package into the sandbox and run as `python judge/_rlvr_supervisor.py`. Its stdin
carries two lines: the config, then a per-verification key. The worker is forked before the key is read, so
the key never exists in the worker's memory; the worker gets neither stdin nor this process's stdout, so it
cannot sign a forged result. This process never imports candidate code. The worker's output goes to a capped
file, and its whole process group is killed at the deadline or when it ends.

What only this process can see, outside the candidate's reach, goes into the signed payload as well: the
arrival time of every message by this process's own clock (`at`, seconds since the fork: the trusted timing of
tests and cases), whether the worker survived a SIGTERM at the deadline (a handler that ignores termination),
and whether a file system filled up or a file reached the size cap during the run (`caps`).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import resource
import select
import signal
import sys
import time

MARK = "RLVR-RESULT"
MAX_MESSAGES_BYTES = 8 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
TERM_GRACE_S = 0.5
"""How long the worker has to die (or react) after the SIGTERM at the deadline."""
DISK_SAMPLE_S = 0.05
MOUNTS = ("/tmp", "/dev/shm")
"""File systems watched beside the candidate's own (the workspace)."""


class Disks:
    """Watches the file systems a candidate can write for the moment one fills up."""

    def __init__(self, cand: str) -> None:
        self.paths = [p for p in (cand, *MOUNTS) if os.path.isdir(p)]
        self.full: list[str] = []
        self.was_full = {p for p in self.paths if self._full(p)}
        self.last = 0.0

    @staticmethod
    def _full(path: str) -> bool:
        try:
            st = os.statvfs(path)
        except OSError:
            return False
        total = st.f_blocks * st.f_frsize
        return st.f_bavail * st.f_frsize < max(256 << 10,
                                               total // 100) or (st.f_files > 0 and st.f_favail == 0)

    def sample(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < DISK_SAMPLE_S:
            return
        self.last = now
        for p in self.paths:
            if p not in self.full and p not in self.was_full and self._full(p):
                self.full.append(p)


def _largest_file(roots: list[str]) -> tuple[int, str]:
    """(size, path) of the biggest regular file under the roots (symlinks not followed)."""
    best = (0, "")
    for root in roots:
        if os.path.isfile(root):
            best = max(best, (os.lstat(root).st_size, root))
        for dirpath, dirnames, filenames in os.walk(root):
            for fn in filenames:
                path = os.path.join(dirpath, fn)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if st.st_size > best[0]:
                    best = (st.st_size, path)
    return best


def _group(pgid: int) -> list[str]:
    """The /proc entries of the group's processes that still run (zombies aside)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            out.append(name)
    return out


def _refuses_term(pgid: int) -> bool:
    """Whether a process of the group ignores or blocks SIGTERM (its SigIgn / SigBlk masks)."""
    for name in _group(pgid):
        try:
            with open(f"/proc/{name}/status") as f:
                masks = dict(line.split(":", 1) for line in f if line.startswith(("SigIgn", "SigBlk")))
        except (OSError, ValueError):
            continue
        if any(int(v.strip(), 16) & (1 << (signal.SIGTERM - 1)) for v in masks.values()):
            return True
    return False


def _clear(cand: str, out_path: str) -> None:
    """Remove what the run left in the workspace (the host reads back only the judge's files): a workspace
    filled with junk is not copied back out of the sandbox."""
    import shutil

    shutil.rmtree(cand, ignore_errors=True)
    try:
        os.remove(out_path)
    except OSError:
        pass


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
        # the harness itself failed: its traceback goes to the output tail
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            os._exit(70)
    os.close(w)
    return pid, r


def _read_messages(fd: int, pid: int, t0: float, deadline: float,
                   disks: Disks) -> tuple[list[dict], bool, int, int | None]:
    """JSON-line messages until EOF or the deadline, each stamped with its arrival (`at`, seconds since `t0`);
    (messages, timed_out, malformed lines, wait status)."""
    buf, messages, total, bad = b"", [], 0, 0
    timed_out, status = False, None
    while True:
        disks.sample()
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], min(left, DISK_SAMPLE_S))
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
        at = round(time.monotonic() - t0, 6)
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(msg, dict):
                msg["at"] = at
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
    disks = Disks(config["cand"])
    t0 = time.monotonic()
    pid, r = _fork_worker(config, out_path)
    key = bytes.fromhex(_read_line().decode().strip())
    messages, timed_out, bad, status = _read_messages(r, pid, t0, t0 + float(config["timeout"]), disks)
    ignored_term = False
    if timed_out:  # SIGTERM first: a program that ignores, blocks or silently catches it is refusing to end
        refuses = _refuses_term(pid)
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        more, _, bad2, status = _read_messages(r, pid, t0, time.monotonic() + TERM_GRACE_S, disks)
        messages += more
        bad += bad2
        end = time.monotonic() + TERM_GRACE_S
        # the pipe closes a moment before the exit is reapable
        while status is None and time.monotonic() < end:
            done, st = os.waitpid(pid, os.WNOHANG)
            status = st if done else None
            time.sleep(0 if status is not None else 0.01)
        alive = status is None or bool(_group(pid))
        ignored_term = refuses or (alive and not more)  # a graceful handler reports (the test fails) or exits
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if status is None:
        _, status = os.waitpid(pid, 0)
    disks.sample(force=True)
    cap = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    # without a file size cap (an unisolated pool) there is nothing to reach, and /tmp is then the host's own:
    # walking it can take longer than the run's deadline
    size, big = _largest_file([config["cand"], *MOUNTS, out_path]) if cap != resource.RLIM_INFINITY else (0,
                                                                                                          "")
    caps = {"disk_full": disks.full, "ignored_sigterm": ignored_term,
            "file_at_cap": big.replace(config["cand"], "workspace") if cap != resource.RLIM_INFINITY
            and size >= cap else None}
    code = os.waitstatus_to_exitcode(status)
    try:
        with open(out_path, "rb") as f:
            f.seek(max(0, os.path.getsize(out_path) - 4000))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        tail = ""
    _clear(config["cand"], out_path)
    payload = json.dumps({"messages": messages, "timed_out": timed_out, "malformed": bad,
                          "exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None,
                          "output_tail": tail, "wall_s": time.monotonic() - t0, "caps": caps},
                         separators=(",", ":"))
    mac = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
    sys.stdout.write(f"{MARK} {mac} {payload}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
