"""A real `rlvr serve` process on a free loopback port, and what it holds (for the leak checks)."""
from __future__ import annotations

import glob
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rlvr.integrations.openenv import launched
from tests.conftest import ADD_HIDDEN, ADD_SOLUTION, ADD_WORKSPACE, child_pids, write_task


def write_add_pack(root: Path, names: tuple[str, ...] = ("add", "add2")) -> Path:
    """A pack of multi-turn code tasks (write add(a, b); hidden tests judge it)."""
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        write_task(root, n, toml=f'id = "{n}"\ndomain = "code"\n[limits]\nmax_turns = 6\n',
                   workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN, solution=ADD_SOLUTION)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    token: str | None
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def pool_base(self) -> Path:
        found = [p for root in ("/dev/shm", "/tmp") for p in glob.glob(f"{root}/rlvr-sbx-{self.proc.pid}-*")]
        assert len(found) == 1, found
        return Path(found[0])

    def leases(self) -> list[str]:
        return sorted(os.listdir(self.pool_base() / "leases"))

    def descendants(self) -> set[int]:
        """Every process below the server, read until two readings agree (threads come and go while it serves:
        a thread that ends between listing and reading its `children` must not hide the others' children)."""
        last: set[int] | None = None
        for _ in range(20):
            now = self._descendants_once()
            if now == last:
                return now
            last = now
        return last or set()

    def _descendants_once(self) -> set[int]:
        out: set[int] = set()
        stack = [self.proc.pid]
        while stack:
            kids = child_pids(stack.pop())
            out.update(kids)
            stack += kids
        return out

    def held(self) -> dict[str, object]:
        """What the server holds beyond its warm pool: leases, processes, mounts, files under the pool."""
        return {"leases": self.leases(), "processes": len(self.descendants()),
                "mounts": Path("/proc/self/mounts").read_text().count("\n"),
                "pool dir": sorted(os.listdir(self.pool_base()))}


@contextmanager
def serve(tasks: str, *args: str, token: str | None = None, tmp: Path) -> Iterator[Server]:
    """Start `rlvr serve --tasks TASKS ARGS` on a free port and wait until /health answers."""
    if token:
        (tmp / "token").write_text(token + "\n")
        args = (*args, "--token-file", str(tmp / "token"))
    with (tmp / "serve.log").open("w+") as log, launched(tasks, *args, token=token, log=log) as (proc, url):
        yield Server(proc, url, token, tmp / "serve.log")
