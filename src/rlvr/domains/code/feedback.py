"""The code domain's check of an attempts task's answer (`Domain.feedback`, `Task.attempts`): the answer laid
into the answer file, run on the task's visible io cases (`[verifier] visible_io`) under the verifier's own
trusted harness, and the cases it failed, each with its call, the expected result and what the answer gave.

No hidden material enters that run (the task's hidden files are left out) and the expected results never
enter the sandbox: they are compared on the host, as the verifier compares its io cases. An answer that does
not compile is read on the host as the harness would report it. Checks are cached by (task, answer): the
samples of a GRPO group repeat their answers, and each repeat would cost a sandboxed run.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

from rlvr.domains.code.cases import call_args, case_results, io_literals
from rlvr.domains.code.problem import compact
from rlvr.domains.code.settings import CodeSettings
from rlvr.domains.code.verifier import CodeVerifier
from rlvr.domains.code.workspace import candidate_files
from rlvr.envs.feedback import Check, Failure
from rlvr.errors import InfraError, UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.settings import settings_of
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext

CACHE_SIZE = 1 << 16
"""Checks kept (the oldest go first); one is a few hundred bytes."""
ERROR_CHARS = 80
"""Characters of an error said back in place of the failures (the first line of it)."""

_cache: OrderedDict[str, Check] = OrderedDict()
_lock = threading.Lock()


def feedback(pool: SandboxPool | None, task: Task, answer: str) -> Check:
    """`answer`'s check on the task's visible cases (see the module docstring); an infra fault of the run
    raises InfraError (the env retries it, then masks the episode)."""
    s = settings_of(task, CodeSettings)
    if s.visible_io is None or s.io is None:
        raise UserError("an attempts task of the code domain needs visible io cases to check answers on",
                        file=task.source or task.key, field="verifier.visible_io",
                        fix="add a workspace file of `(args, expected)` lines and name it in visible_io")
    visible = task.workspace[s.visible_io]
    key = hashlib.sha256("\0".join((task.key, visible, s.answer_template, answer)).encode()).hexdigest()
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    if pool is None:
        raise InfraError("checking an answer needs a sandbox pool")
    check = _run(pool, task, s, visible, answer)
    with _lock:
        _cache[key] = check
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return check


def _run(pool: SandboxPool, task: Task, s: CodeSettings, visible: str, answer: str) -> Check:
    assert s.io is not None and s.visible_io is not None
    expected = io_literals(visible, task, f"verifier.visible_io ({s.visible_io})")
    judge = s.model_copy(update={"tests": [], "io": s.io.model_copy(update={"file": s.visible_io})})
    files = candidate_files(task, FinalState(answer=answer), s)
    bare = task.model_copy(update={"hidden": {}})  # nothing hidden enters the run
    rep, err = CodeVerifier(VerifyContext(pool=pool)).run_harness(pool, bare, files, judge, expected)
    if err:
        raise InfraError(err)
    if rep.cases_error:  # nothing ran: the entry does not import (a syntax error, a name it lacks)
        return Check(passed=False, error=rep.cases_error.strip().splitlines()[0][:ERROR_CHARS])
    function = s.io.entry.rpartition(":")[2]
    failures = []
    for i, (ok, got, want) in enumerate(case_results(judge, rep, expected)):
        if ok:
            continue
        msg: dict[str, Any] = rep.cases.get(i) or {}
        if msg.get("out") is not None:
            said = f"returned {compact(got)}"
        elif msg.get("error"):
            said = "raised " + str(msg["error"]).partition(":")[0]
        else:
            said = "timed out" if rep.payload and rep.payload.get("timed_out") else "gave no result"
        args = ",".join(compact(a) for a in call_args(expected["inputs"][i]))
        failures.append(Failure(call=f"{function}({args})", expected=compact(want), got=said))
    return Check(passed=not failures, failures=tuple(failures))
