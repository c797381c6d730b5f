"""The shell verifier: a final state judged by its family's checks (`rlvr.domains.shell.families`), on the
host from its files and tree, and in a fresh lease of the task's image where the candidate's own scripts run
on fresh inputs or git is asked about its repository. Score 1 when every check passes, else 0; `passed` also
needs no flag. A sandbox that fails is an infra fault (masked); what the candidate's scripts do is theirs."""
from __future__ import annotations

import random
import time

from rlvr.domains.shell.families.base import Judging, check, of_files
from rlvr.domains.shell.source import ShellSettings, family_of
from rlvr.errors import InfraError
from rlvr.sandbox.limits import for_task
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, default_pool, derive_seed, settings_of
from rlvr.verify.verdict import Verdict


class ShellVerifier:
    """Judges a shell task's final workspace."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        t0 = time.perf_counter()
        settings_of(task, ShellSettings)
        fam, p = family_of(task)
        seed = self.ctx.seed
        try:
            state = of_files(final.files)
        except ValueError as exc:
            return Verdict.from_checks([check("the final tree", False, str(exc))], seed=seed)
        pool = self.ctx.pool or default_pool()
        j = Judging(state, dict(final.files), random.Random(derive_seed(seed, "fresh", task.key)), pool,
                    for_task(pool, task, timeout_s=60))
        try:
            checks, flags = fam.judge(p, j)
        except InfraError as exc:
            return Verdict.infra(f"the shell sandbox failed: {exc}", seed=seed,
                                 timings={"total": time.perf_counter() - t0})
        finally:
            j.close()
        ok = bool(checks) and all(c.passed for c in checks)
        return Verdict(score=1.0 if ok else 0.0, passed=ok and not flags, checks=checks, flags=flags,
                       seed=seed, timings={"total": time.perf_counter() - t0, "sandbox_cpu": j.cpu_s})
