"""The containment self-test behind `rlvr sandbox check`: one named check per property of the threat model."""
from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlvr.sandbox.base import SandboxPool, in_environment
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus

TIGHT = ExecLimits(timeout_s=1.5, memory_mb=128, processes=32, output_bytes=4096, workspace_mb=16,
                   file_size_mb=8)
"""Limits the hostile programs run under."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one containment check."""

    name: str
    """What property was checked."""
    passed: bool
    """Whether the sandbox held."""
    detail: str
    """The status and a hint of what happened."""


@dataclass
class Probe:
    """Host-side bait the checks use: a planted secret file, a secret env var, a listening loopback port; and
    the uid jobs are expected to run as (65534, or an image's own non-root user)."""

    secret_file: Path
    secret: str
    port: int
    uid: int = 65534


def _py(pool: SandboxPool, code: str) -> ExecResult:
    return pool.run(["python", "-c", code], limits=TIGHT)


def _detail(r: ExecResult) -> str:
    tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or [""]
    return f"{r.status.value} (exit {r.exit_code}, signal {r.signal}) {tail[0][:80]}"


def _fork_bomb(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    return r.status is ExecStatus.process_limit, r


def _memory_bomb(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, "x = []\nwhile True:\n    x.append(bytearray(10**7))")
    return r.status is ExecStatus.memory_limit, r


def _disk_fill(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * 2**20)\n    i += 1")
    return r.status is ExecStatus.file_limit, r


def _endless_output(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, "while True:\n    print('y' * 1000)")
    return r.status is ExecStatus.output_limit and len(r.stdout) <= TIGHT.output_bytes, r


def _sleeper(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, "import time\ntime.sleep(60)")
    return r.status is ExecStatus.timeout, r


def _detached_daemon(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    name = "rlvrd" + os.urandom(4).hex()
    code = (f"import ctypes, os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)\n        time.sleep(30)\n"
            f"    os._exit(0)\ntime.sleep(0.2)\nprint('left')")
    r = _py(pool, code)
    return r.ok and not processes_named(name), r


def processes_named(name: str) -> list[int]:
    """Host PIDs whose command name is `name` (how the checks find a stray daemon by its planted name)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_text().strip() == name:
                found.append(int(d.name))
        except OSError:
            continue
    return found


def _loopback(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {p.port}), timeout=1)\n"
                  "    print('CONNECTED')\nexcept OSError as e:\n    print('REFUSED', e)")
    return r.ok and r.stdout.startswith("REFUSED"), r


def _shadow(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, "print(open('/etc/shadow').read())")
    return r.status is ExecStatus.exit_nonzero and "root:" not in r.stdout, r


def _secret_file(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, f"print(open({str(p.secret_file)!r}).read())")
    return p.secret not in r.stdout + r.stderr, r


def _secret_env(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool, "import os\nprint(sorted(os.environ.items()))")
    return r.ok and p.secret not in r.stdout and "RLVR_CHECK_SECRET" not in r.stdout, r


def _write_outside(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    target = p.secret_file.with_name(p.secret_file.name + ".written")
    code = (f"import os\nfor t in ['/usr/pwned', '/etc/pwned', {str(target)!r}, '/pwned']:\n    try:\n"
            f"        open(t, 'w').write('x')\n        print('WROTE', t)\n    except OSError:\n        pass")
    r = _py(pool, code)
    return "WROTE" not in r.stdout and not target.exists() and not Path("/pwned").exists(), r


def _kill_parent(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool,
            "import os, signal\nfor pid in (os.getppid(), 1):\n    try:\n        os.kill(pid, "
            "signal.SIGKILL)\n"
                  "    except OSError:\n        pass\nprint('still here')")
    after = _py(pool, "print('next')")
    return r.status is not ExecStatus.infra_error and after.ok and after.stdout == "next\n", r


def _ptrace(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nok = []\n"
            "for pid in range(1, 64):\n    if pid != os.getpid() and libc.ptrace(16, pid, 0, 0) == 0:\n"
            "        ok.append(pid)\nprint('ATTACHED', ok)")
    r = _py(pool, code)
    return r.ok and "ATTACHED []" in r.stdout, r


def _user_namespace(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    """An unprivileged program that makes a user namespace is root inside it: mounts, netfilter,
    namespaces."""
    r = _py(pool, "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                  "print(libc.unshare(0x10000000), ctypes.get_errno())")  # CLONE_NEWUSER
    return r.ok and r.stdout == "-1 1\n", r


def _unprivileged(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    r = _py(pool,
            "import os\nprint(os.getuid(), os.geteuid(), "
            "open('/proc/self/status').read().split('NoNewPrivs:')[1]"
                  ".split()[0], open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
    return r.ok and r.stdout.split() == [str(p.uid), str(p.uid), "1", "0000000000000000"], r


def _setuid_inert(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    """A setuid binary grants nothing: every mount the program sees is nosuid (and no_new_privs is set)."""
    r = _py(pool, "rows = [l.split() for l in open('/proc/self/mountinfo')]\n"
                  "print([r[4] for r in rows if 'nosuid' not in r[5].split(',')])")
    return r.ok and r.stdout == "[]\n", r


def _ipc_left_behind(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    """A System V shared-memory segment outlives its creator: one job's must not be there for the next."""
    key = int.from_bytes(os.urandom(3), "big") + 1
    made = [_py(pool, f"import ctypes\nprint('MADE', ctypes.CDLL(None).shmget({key}, 4096, 0o1666))")
            for _ in range(2)]  # one per worker of a two-worker pool, which serves jobs in turn
    found = [_py(pool, f"import ctypes\nprint('FOUND', ctypes.CDLL(None).shmget({key}, 0, 0) >= 0)")
             for _ in range(2)]
    created = all(r.ok and r.stdout.startswith("MADE ") and not r.stdout.startswith("MADE -") for r in made)
    return created and all(r.ok and r.stdout == "FOUND False\n" for r in found), found[-1]


def _socket_left_behind(pool: SandboxPool, p: Probe) -> tuple[bool, ExecResult]:
    """A closed TCP connection lingers in TIME_WAIT: the next job must neither see it nor find its port
    taken."""
    port = 20000 + int.from_bytes(os.urandom(2), "big") % 20000
    code = (f"import socket\nprint(len(open('/proc/net/tcp').readlines()) - 1)\ns = socket.socket()\n"
            f"s.bind(('127.0.0.1', {port}))\ns.listen()\nc = "
            f"socket.create_connection(('127.0.0.1', {port}))\n"
            "x, _ = s.accept()\nx.close()\nc.close()\ns.close()")
    runs = [_py(pool, code) for _ in range(3)]  # a two-worker pool serves jobs in turn
    return all(r.ok and r.stdout == "0\n" for r in runs), runs[-1]


CHECKS: dict[str, Callable[[SandboxPool, Probe], tuple[bool, ExecResult]]] = {
    "fork bomb stopped by the process limit": _fork_bomb,
    "memory bomb stopped by the memory limit": _memory_bomb,
    "disk fill stopped by the workspace and file-size limits": _disk_fill,
    "endless output capped and stopped": _endless_output,
    "sleeper stopped at the wall-clock timeout": _sleeper,
    "detached daemon killed with its job": _detached_daemon,
    "host loopback unreachable": _loopback,
    "/etc/shadow unreadable": _shadow,
    "host files outside the workspace invisible": _secret_file,
    "host environment scrubbed": _secret_env,
    "writes outside the workspace refused": _write_outside,
    "killing its parent harms nothing": _kill_parent,
    "ptrace of other processes refused": _ptrace,
    "unprivileged user, no_new_privs, no capabilities": _unprivileged,
    "setuid binaries inert (every mount nosuid)": _setuid_inert,
    "no user namespaces (seccomp)": _user_namespace,
    "no System V IPC object passes from one job to the next": _ipc_left_behind,
    "no network state passes from one job to the next": _socket_left_behind,
}
"""Property -> check. Each returns (held, the hostile program's result)."""


def run_checks(pool: SandboxPool, names: list[str] | None = None,
               image: str | None = None) -> list[CheckResult]:
    """Run the containment checks against a pool, on the host root or in `image` (a reference: the pool builds
    or pulls it, and the checks' programs run inside it); every check plants and removes its own bait."""
    uid = 65534
    if image is not None:
        resolve = getattr(pool, "resolve_image", None)
        uid = resolve(image).uid if resolve is not None else uid
        pool = in_environment(pool, image)
    secret = "rlvr-check-" + os.urandom(8).hex()
    with tempfile.TemporaryDirectory(prefix="rlvr-check-") as tmp:
        secret_file = Path(tmp) / "secret.txt"
        secret_file.write_text(secret)
        old = os.environ.get("RLVR_CHECK_SECRET")
        os.environ["RLVR_CHECK_SECRET"] = secret
        srv = socket.socket()
        try:
            srv.bind(("127.0.0.1", 0))
            srv.listen()
            probe = Probe(secret_file, secret, srv.getsockname()[1], uid)
            results = []
            for name in names or list(CHECKS):
                held, r = CHECKS[name](pool, probe)
                results.append(CheckResult(name, held, _detail(r)))
            return results
        finally:
            srv.close()
            if old is None:
                os.environ.pop("RLVR_CHECK_SECRET", None)
            else:
                os.environ["RLVR_CHECK_SECRET"] = old
