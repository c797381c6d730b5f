"""The c verifier: the final sources compiled with the hidden harness under AddressSanitizer and UBSan in a
fresh sandbox, each case run in its own process by a trusted supervisor (`harness/supervisor.py`), judged on
the host against the Python model's expected output.

The cases are the task's hidden ones and as many drawn afresh from the verification seed, so answers keyed
on inputs never seen cannot pass. A case passes when its process exits 0 (no sanitizer report, no leak, no
crash, no time-out) and printed exactly what the model says. Score: the fraction of cases passed;
`passed`: every case and no integrity flag (`rlvr.domains.c.integrity`). A harness that does not compile, a
supervisor that cannot report and a sandbox that fails are infra faults (masked); whatever the candidate's
sources do is theirs.
"""
from __future__ import annotations

import json
import random
import time

from rlvr.domains.c import integrity
from rlvr.domains.c.families import registry
from rlvr.domains.c.families.base import Case
from rlvr.domains.c.harness import LEAK_EXIT, MARK, SUPERVISOR, hidden_harness, supervisor_source
from rlvr.domains.c.settings import CSettings
from rlvr.domains.c.source import cases_of
from rlvr.sandbox.limits import for_task
from rlvr.sandbox.result import ExecStatus
from rlvr.tasks.spec import Files, FinalState, Task
from rlvr.verify.base import VerifyContext, default_pool, derive_seed, settings_of
from rlvr.verify.signed import authenticate, new_key
from rlvr.verify.verdict import Check, Flag, Verdict


def candidate_files(files: Files, module: str) -> dict[str, str]:
    """What the hidden build sees of the final state: the sources under src/ and the headers under include/
    (nothing else of the workspace reaches the verification sandbox, least of all a judge/ directory)."""
    return {p: t for p, t in files.items()
            if (p.startswith("src/") and p.count("/") == 1 and p.endswith((".c", ".h")))
            or (p.startswith("include/") and p.endswith(".h"))}


def outcome(case: Case, got: dict) -> tuple[bool, str]:
    """(passed, why not) for one case's process."""
    if got.get("timeout"):
        return False, "timed out"
    rc, sig, err = got.get("rc"), got.get("signal"), (got.get("err") or "").strip()
    if sig:
        return False, f"killed by signal {sig}" + (f": {err.splitlines()[0][:200]}" if err else "")
    if rc == LEAK_EXIT:
        return False, err.splitlines()[0][:200] if err else "memory leaked"
    if rc != 0:
        first = next((ln for ln in err.splitlines() if "ERROR" in ln or "runtime error" in ln), err[:200])
        return False, f"exit status {rc}" + (f": {first.strip()[:200]}" if first else "")
    if got.get("out") != case.expect:
        return False, f"printed {got.get('out', '')[:160]!r}, expected {case.expect[:160]!r}"
    return True, ""


class CVerifier:
    """Judges a c task's final sources."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        t0 = time.perf_counter()
        s = settings_of(task, CSettings)
        fam = registry()[s.family]
        files = candidate_files(final.files, s.module)
        flags: list[Flag] = integrity.static_flags(task, final.files, s.module)
        seed = self.ctx.seed
        cases = cases_of(task.hidden) + fam.cases(dict(s.params), random.Random(
            derive_seed(seed, "fresh", task.key)), s.fresh)
        timings = {"static": time.perf_counter() - t0}
        if not any(p.startswith("src/") and p.endswith(".c") for p in files):
            missing = Check(name="build", score=0.0, detail="no source under src/")
            return Verdict.from_checks([missing], flags, seed=seed, timings=timings)
        header = task.workspace[f"include/{s.module}.h"]  # the pristine one: the harness never sees another
        harness = hidden_harness(s.module, cases)
        judge = {**harness, f"judge/{s.module}.h": header, SUPERVISOR: supervisor_source()}
        config = {"sources": sorted(p for p in files if p.endswith(".c")), "harness": sorted(harness),
                  "cases": len(cases),
                  "case_timeout_s": s.case_timeout_s, "compile_timeout_s": s.compile_timeout_s,
                  "judge_files": sorted(judge)}
        key = new_key()
        pool = self.ctx.pool or default_pool()
        budget = s.compile_timeout_s + len(cases) * (s.case_timeout_s + 1) + 30
        limits = for_task(pool, task, timeout_s=budget, memory_mb=1024)
        t1 = time.perf_counter()
        res = pool.run(["python", SUPERVISOR], files={**files, **judge}, stdin=json.dumps(config) + "\n" + key
                       + "\n", limits=limits)
        timings["sandbox"] = time.perf_counter() - t1
        timings["sandbox_cpu"] = res.cpu_s  # what the verification costs, whatever else the machine runs
        if res.status == ExecStatus.infra_error:
            return Verdict.infra(f"the c sandbox failed: {res.error}", seed=seed, timings=timings)
        payload, forged = authenticate(res.stdout, MARK, key)
        if forged:
            flags.append(integrity.flag("report_forgery", f"{forged} forged result line(s)"))
        if payload is None:
            if res.status == ExecStatus.ok:  # the supervisor ran to its end and said nothing: not theirs
                return Verdict.infra(f"the c supervisor gave no result: {res.stderr.strip()[-300:]}",
                                     seed=seed, timings=timings)
            check = Check(name="build", score=0.0,
                          detail=f"the verification ended early ({res.status.value})")
            seen = integrity.Evidence(seen=f"{res.status.value}, signal {res.signal}")
            flags.append(integrity.flag("sabotage", "the supervisor was stopped before it reported", [seen]))
            return Verdict.from_checks([check], flags, seed=seed, timings=timings)
        return self._judge(payload, cases, flags, seed, timings)

    def _judge(self, payload: dict, cases: list[Case], flags: list[Flag], seed: int,
               timings: dict[str, float]) -> Verdict:
        build = payload.get("build") or {}
        if payload.get("fault") == "toolchain":
            why = (build.get("harness") or {}).get("log") or build.get("error") or "unknown"
            return Verdict.infra(f"the hidden harness did not compile: {why[-300:]}", seed=seed,
                                 timings=timings)
        flags += integrity.build_flags(build)
        if payload.get("fault") == "candidate":
            log = (build.get("link") or build.get("candidate") or {}).get("log", "")
            check = Check(name="build", score=0.0, detail="the sources do not compile or link: "
                                                          f"{log.strip()[-400:]}")
            return Verdict.from_checks([check], flags, seed=seed, timings=timings,
                                       details={"build_log": log[-2000:]})
        timings.update({f"supervisor_{k}": v for k, v in (build.get("times") or {}).items()})
        ran = payload.get("cases") or []
        flags += integrity.case_flags(ran)
        checks = []
        for k, case in enumerate(cases):
            ok, why = outcome(case, ran[k] if k < len(ran) else {"rc": None, "err": "not run"})
            checks.append(Check(name=f"case[{k}]: {case.label[:120]}", score=float(ok), passed=ok,
                                detail=why))
        return Verdict.from_checks(checks, flags, seed=seed, timings=timings,
                                   details={"cases": len(cases), "passed": sum(c.passed for c in checks)})
