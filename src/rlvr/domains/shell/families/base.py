"""The base of the shell domain's families: a `Family` is a kind of terminal task (the package docstring
says what one knows), a `Snapshot` a workspace with its modes and links, `Judging` what a family's judge may
use."""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rlvr.sandbox import tree
from rlvr.sandbox.base import Sandbox
from rlvr.sandbox.result import ExecLimits, ExecResult
from rlvr.sandbox.tree import TREE, Member
from rlvr.verify.verdict import Check, Evidence, Flag

Snapshot = dict[str, Member]
"""A workspace by path: files, directories and links with their modes."""


def snapshot(members: Iterable[Member]) -> Snapshot:
    return {m.path: m for m in members}


def as_files(state: Snapshot, packed: bool) -> dict[str, str]:
    """A snapshot as a task's or a final state's files: packed whole, or its text files."""
    if packed:
        return {TREE: tree.pack(state.values())}
    return {p: m.data.decode("utf-8") for p, m in state.items() if m.kind == "file"}


def of_files(files: dict[str, str]) -> Snapshot:
    """The snapshot a final state's files describe (text files alone are mode 0644); ValueError for an archive
    that does not unpack."""
    if TREE in files:
        return tree.members(files[TREE])
    return {p: Member(p, t.encode("utf-8")) for p, t in files.items()}


def text_of(state: Snapshot, path: str) -> str | None:
    """A regular file's text (None: missing, a link, a directory or not UTF-8)."""
    m = state.get(path)
    if m is None or m.kind != "file":
        return None
    try:
        return m.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def check(name: str, ok: bool, detail: str = "") -> Check:
    return Check(name=name, score=float(ok), passed=ok, detail="" if ok else detail[:300])


def flag(kind: str, message: str, seen: str = "", file: str | None = None) -> Flag:
    return Flag(kind=kind, message=message, evidence=[Evidence(file=file, seen=seen[:200])])


def same_output(got: str, want: str) -> bool:
    """Outputs compare line by line, trailing blanks and a final newline aside."""
    def lines(text: str) -> list[str]:
        return [ln.rstrip() for ln in text.rstrip("\n").split("\n")]
    return lines(got) == lines(want)


@dataclass
class Judging:
    """What a family's judge may use: the final state and, on demand, a fresh lease of the task's image that
    holds it (tree restored), and the Random of the fresh inputs."""

    state: Snapshot
    files: dict[str, str]
    rng: random.Random
    pool: Any = None
    limits: ExecLimits | None = None
    _sandbox: Sandbox | None = None
    _lease: Any = None
    infra: str | None = None
    """Set when the sandbox failed: the verdict is then an infra fault."""
    cpu_s: float = 0.0
    """CPU seconds the lease's jobs used (the verification's own cost, whatever else the machine runs)."""

    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            # a text state's files that were binary (a build's outputs) came back mangled: they stay out
            files = self.files if TREE in self.files else {p: t for p,
                                                           t in self.files.items() if "\ufffd" not in t}
            self._lease = self.pool.lease(files)
            self._sandbox = self._lease.__enter__()
            if TREE in self.files:
                tree.restore(self._sandbox)
        return self._sandbox

    def run(self, script: str, files: dict[str, str] | None = None,
            timeout_s: float | None = None) -> ExecResult:
        """`bash -c script` in the lease (the candidate's code may run in it); an infra fault raises."""
        from rlvr.errors import InfraError
        from rlvr.sandbox.limits import resolve

        limits = self.limits if timeout_s is None else resolve(self.limits, task={"timeout_s": timeout_s})
        res = self.sandbox().run(["bash", "-c", script], files=files, limits=limits)
        self.cpu_s += res.cpu_s
        if res.infra_error:
            raise InfraError(res.error or "sandbox infra error")
        return res

    def close(self) -> None:
        lease, self._lease, self._sandbox = self._lease, None, None
        if lease is not None:
            lease.__exit__(None, None, None)


class Family(ABC):
    """A kind of terminal task."""

    name: str
    tier: str
    packed: bool = False
    """Whether the workspace is a packed tree (modes, links, empty directories or a git repository count)."""
    sandbox: bool = True
    """Whether judging needs the image (the candidate's scripts run on fresh inputs, or git is asked)."""

    @abstractmethod
    def params(self, rng: random.Random) -> dict[str, Any]:
        """The task's parameters (plain JSON values), drawn from `rng`: the whole task follows from them."""

    @abstractmethod
    def initial(self, p: dict[str, Any]) -> Snapshot:
        """The workspace the task starts from."""

    @abstractmethod
    def prompt(self, p: dict[str, Any]) -> str:
        """What to do."""

    @abstractmethod
    def solve(self, p: dict[str, Any]) -> list[str]:
        """Bash commands that do it (the gold trajectory), run in the workspace."""

    @abstractmethod
    def gold(self, p: dict[str, Any]) -> Snapshot:
        """The state `solve` leaves (the gold final state)."""

    def wrongs(self, p: dict[str, Any]) -> dict[str, Snapshot]:
        """Named wrong final states beside the untouched and the empty workspace (negative controls)."""
        return {}

    @abstractmethod
    def judge(self, p: dict[str, Any], j: Judging) -> tuple[list[Check], list[Flag]]:
        """The checks of a final state, and the hacks seen in it."""
