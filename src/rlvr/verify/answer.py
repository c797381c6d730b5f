"""Final-answer extraction shared by the answer verifiers: drop the reasoning, find the one marked answer.

The convention every single-turn domain documents in its prompt: reasoning may come first (inside
`<think>...</think>` or as plain text), and the final answer goes inside `<answer>...</answer>`. Without
answer tags, a verifier chooses a fallback (the last `\\boxed{}` for math, the whole remaining text for strict
exact-match domains). Two or more *different* marked answers are a hedge and yield no answer at all, so
"the right answer among wrong ones" never counts.
"""
from __future__ import annotations

import atexit
import os
import pickle
import re
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifierSettings, VerifyContext, register_verifier, settings_of
from rlvr.verify.integrity_probes import answer_parroting
from rlvr.verify.verdict import Check, Verdict

THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
ANSWER_OPEN = re.compile(r"</?answer>", re.IGNORECASE)

class Fallback(str, Enum):
    """Where the answer is taken from when the text has no answer tags."""

    whole = "whole"
    """The whole text left after removing the reasoning (strict: any extra words make it wrong)."""
    boxed = "boxed"
    """The last `\\boxed{...}` (one distinct value), else the last non-empty line."""
    none = "none"
    """No tags, no answer."""


@dataclass(frozen=True)
class FinalAnswer:
    """The answer found in a response, or why there is none."""

    text: str | None
    """The extracted answer (stripped), or None."""
    how: str
    """Where it came from: tag, boxed, last_line, whole, or none."""
    problem: str = ""
    """Why no answer was found (empty when `text` is set)."""


def strip_reasoning(text: str) -> str:
    """Remove `<think>` blocks; an unclosed `<think>` hides everything after it, and a lone `</think>`
    (a template that opened the block in the prompt) hides everything before it."""
    text = THINK_BLOCK.sub("", text)
    closes = list(THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = THINK_OPEN.search(text)
    if opened:
        text = text[:opened.start()]
    return text


def _distinct(values: list[str]) -> list[str]:
    return list(dict.fromkeys(" ".join(v.split()) for v in values))


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}`, braces balanced."""
    found: list[str] = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append(text[m.end():i - 1].strip())
    return found


def extract_answer(response: str | None, fallback: Fallback = Fallback.whole) -> FinalAnswer:
    """The single final answer of `response` (see the module docstring for the convention)."""
    if response is None or not response.strip():
        return FinalAnswer(None, "none", "empty response")
    body = strip_reasoning(response)
    tagged = ANSWER_TAG.findall(body)
    if tagged:
        distinct = _distinct([t.strip() for t in tagged])
        if len(distinct) > 1:
            return FinalAnswer(None, "tag", f"{len(distinct)} different answers marked")
        value = tagged[-1].strip()
        if ANSWER_OPEN.search(value):
            return FinalAnswer(None, "tag", "nested answer tags")
        return FinalAnswer(value or None, "tag", "" if value else "empty answer tag")
    if ANSWER_OPEN.search(body):
        return FinalAnswer(None, "tag", "unbalanced answer tag")
    if fallback is Fallback.none:
        return FinalAnswer(None, "none", "no <answer> tag")
    if fallback is Fallback.boxed:
        boxed = boxed_contents(body)
        if boxed:
            distinct = _distinct(boxed)
            if len(distinct) > 1:
                return FinalAnswer(None, "boxed", f"{len(distinct)} different boxed answers")
            return FinalAnswer(boxed[-1] or None, "boxed", "" if boxed[-1] else "empty box")
        lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
        if not lines:
            return FinalAnswer(None, "none", "no answer after the reasoning")
        return FinalAnswer(lines[-1], "last_line")
    value = body.strip()
    return FinalAnswer(value or None, "whole", "" if value else "no answer after the reasoning")


def normalize_text(text: str) -> str:
    """Whitespace-insensitive form for exact comparison: trailing spaces and blank edges dropped, runs of
    spaces inside a line collapsed; line structure (grids, matrices) kept."""
    lines = [" ".join(ln.split()) for ln in text.strip().splitlines()]
    return "\n".join(lines).strip()


def tagged(answer: str) -> str:
    """`answer` wrapped in the answer tags (gold final states and controls)."""
    return f"<answer>{answer}</answer>"


T = TypeVar("T")
GUARD_TIMEOUT_S = 10.0
GUARD_MEMORY_MB = 1024
WARM_TIMEOUT_S = 300.0
"""How long the guard process may take to import what a call needs (not counted against the call)."""
_LEN = struct.Struct("<Q")


def _send(stream: Any, obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _recv_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _Worker:
    """One long-lived child interpreter (running `_serve`) that runs guarded calls one at a time.

    Killed and restarted when a call overruns its time or dies (out of memory), so the verifier process itself
    never runs third-party parsers on candidate input.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.owner = os.getpid()

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1"}
        return subprocess.Popen([sys.executable, "-c", "from rlvr.verify.answer import _serve; _serve()"],
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, close_fds=True)

    def _stop(self) -> None:
        if self.proc is not None and os.getpid() == self.owner:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
        self.proc = None

    def _reply(self, deadline: float) -> tuple[bool, Any] | None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        head = _recv_exact(fd, _LEN.size, deadline)
        body = _recv_exact(fd, _LEN.unpack(head)[0], deadline) if head else None
        return None if body is None else pickle.loads(body)  # type: ignore[no-any-return]

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float, memory_mb: int,
             warm: tuple[str, ...]) -> tuple[bool, Any]:
        if os.getpid() != self.owner:  # a forked copy of this process: the parent's worker is not ours
            self.proc, self.lock, self.owner = None, threading.Lock(), os.getpid()
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                _send(self.proc.stdin, (fn.__module__, fn.__qualname__, args, memory_mb, warm))
            except (BrokenPipeError, OSError):
                self._stop()
                return False, "the guard process died"
            # imports are not the input's fault: the clock starts once the worker has loaded what it needs
            ready = self._reply(time.monotonic() + WARM_TIMEOUT_S)
            if ready is None or not ready[0]:
                self._stop()
                return False, f"the guard process could not load {fn.__module__}: {ready[1] if ready else 'died'}"
            deadline = time.monotonic() + timeout_s
            result = self._reply(deadline)
            if result is None:
                timed_out = time.monotonic() >= deadline
                self._stop()
                return False, f"took longer than {timeout_s:g} s" if timed_out else "ran out of memory or crashed"
            return result


_WORKER = _Worker()
atexit.register(_WORKER._stop)


def guarded(fn: Callable[..., T], *args: Any, timeout_s: float | None = None, memory_mb: int | None = None,
            warm: tuple[str, ...] = ()) -> tuple[bool, T | str]:
    """Run `fn(*args)` in the guard process with a memory limit and a wall-clock timeout.

    For work on candidate input that third-party code may blow up on (sympy evaluating `9**9**9**9`, a mesh
    file that declares a billion vertices): the verifier process survives whatever the input does. `fn` must
    be a module-level function, and its arguments and result must pickle. Returns (True, result) or
    (False, why). Calls are serialised through one process; limits default to GUARD_TIMEOUT_S and
    GUARD_MEMORY_MB (read at call time). `warm` names modules to import before the clock starts.
    """
    timeout_s = GUARD_TIMEOUT_S if timeout_s is None else timeout_s
    memory_mb = GUARD_MEMORY_MB if memory_mb is None else memory_mb
    return _WORKER.call(fn, args, timeout_s, memory_mb, warm)


def _serve() -> None:
    """The guard process: run requests from stdin, one at a time, each under an extra memory allowance."""
    import importlib
    import resource

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints of the called code must not corrupt the reply stream
    while True:
        head = requests.read(_LEN.size)
        if len(head) < _LEN.size:
            return
        module, qualname, args, memory_mb, warm = pickle.loads(requests.read(_LEN.unpack(head)[0]))
        try:
            for name in (*warm, module):
                importlib.import_module(name)
            fn: Any = importlib.import_module(module)
            for part in qualname.split("."):
                fn = getattr(fn, part)
        except BaseException as exc:  # noqa: BLE001
            _send(replies, (False, f"{type(exc).__name__}: {exc!s:.200}"))
            continue
        _send(replies, (True, "ready"))
        with open("/proc/self/statm") as f:  # allowance on top of what is already mapped
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (memory_mb << 20), resource.RLIM_INFINITY))
        try:
            result: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001  (whatever the input did, report it as data)
            result = (False, f"{type(exc).__name__}: {exc!s:.200}")
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        try:
            _send(replies, result)
        except Exception:  # noqa: BLE001  (an unpicklable result)
            _send(replies, (False, "unpicklable result"))


class AnswerSettings(VerifierSettings):
    """The `[verifier]` table of an exact-answer task."""

    fallback: Fallback = Fallback.whole
    """Where the answer is taken from when the response has no answer tags: whole, boxed or none."""
    case_sensitive: bool = True
    """Compare case-sensitively (false: casefolded on both sides)."""


class ExactAnswerVerifier:
    """Kind `answer`: the marked final answer must equal `task.answer` (whitespace-normalised, and
    case-insensitive when the task's `[verifier] case_sensitive = false`). Binary: 1.0 or 0. A wrong answer
    copied from the statement (a literal of the prompt, where the right answer is none) is flagged `parroting`
    (`rlvr.verify.integrity_probes.answer_parroting`)."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        s = settings_of(task, AnswerSettings)
        found = extract_answer(final.answer, s.fallback)
        if found.text is None:
            return Verdict.from_checks([Check(name="answer", score=0.0, detail=found.problem)],
                                       details={"extracted": None, "how": found.how})
        gold, seen = normalize_text(str(task.answer)), normalize_text(found.text)
        if not s.case_sensitive:
            gold, seen = gold.casefold(), seen.casefold()
        ok = gold == seen
        check = Check(name="answer", score=float(ok), passed=ok,
                      detail="exact match" if ok else f"expected {str(task.answer)[:80]!r}, got {found.text[:80]!r}")
        flags = [] if ok else answer_parroting(found.text, task.prompt, str(task.answer)).flags()
        return Verdict.from_checks([check], flags=flags, details={"extracted": found.text, "how": found.how})


register_verifier("answer", ExactAnswerVerifier, settings=AnswerSettings)
