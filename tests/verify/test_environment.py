"""A task's environment reaches its verifier: every sandbox a verifier leases for a task with an image (and
network) runs there, and a task without one leases exactly as before."""
from __future__ import annotations

import pytest
from pydantic import ConfigDict

from rlvr.sandbox.fake import FakePool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify import base
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.verdict import Verdict


class ImageTask(Task):
    """A Task naming an image, as the task loader will make one."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    image: str | None = None
    network: bool = False


class _Runs:
    """A verifier that runs one command in a lease of its context's pool and passes."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        assert self.ctx.pool is not None
        with self.ctx.pool.lease({"a": "1"}) as sb:
            sb.run(["true"])
        self.ctx.pool.run(["true"])
        return Verdict(score=1.0, passed=True)


@pytest.mark.parametrize(("task", "want"), [
    (ImageTask(id="i", domain="code", prompt="p", image="dockerfile:/t/env", network=True),
     ("dockerfile:/t/env", True)),
    (Task(id="h", domain="code", prompt="p"), (None, False)),
])
def test_the_verifiers_sandboxes_run_in_the_tasks_environment(monkeypatch: pytest.MonkeyPatch, task: Task,
                                                              want: tuple[str | None, bool]) -> None:
    monkeypatch.setattr(base, "make_verifier", lambda kind, ctx: _Runs(ctx))
    fake = FakePool()
    assert verify(task, FinalState(), VerifyContext(pool=fake)).passed
    assert [(c.image, c.network) for c in fake.calls] == [want, want]
