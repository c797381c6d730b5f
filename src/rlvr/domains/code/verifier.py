"""The code verifier: runs a task's hidden tests with a trusted harness in a fresh sandbox and flags reward
hacks.

Settings come from the task's `[verifier]` table, validated when the task loads: `rlvr.domains.code.settings`
lists them (hidden `tests` with weights and gates, structural `checks`, randomised `cases`, fixed `io` cases,
`visible_tests`, `needs_change`, `read_only`, `answer_file` / `answer_template`, `timeout_s`). Randomised
cases are drawn from a seed derived from the verification seed (`VerifyContext.seed`) and the task key, which
the Verdict records, so the same (task, final state, seed) gives the same verdict.

Score: the weighted fraction of hidden tests passed, mixed with cases, io cases and structural checks by
weight, then scaled by the share of fresh inputs (the differential check against the reference) the candidate
gets right, so fresh inputs never add credit, they only take away what a table of guessed inputs earned.
`passed`: every hidden test and case passed, required checks passed, and no integrity flag.

Beside this module: `cases` (io and randomised cases, judged on the host), `workspace` (the candidate's and
the reference's files, and what the harness is told of them), `differential` (the fresh inputs).
"""
from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rlvr.domains.code.differential as integrity_differential
from rlvr.domains.code import integrity
from rlvr.domains.code.cases import (
    call_args,
    case_results,
    cases_check,
    check_case_stream,
    draw_cases,
    io_expected,
)
from rlvr.domains.code.harness import GUARDS, SUPERVISOR, VALUES, WORKER, harness_bytecode, harness_files
from rlvr.domains.code.harness.checks import run_static_checks
from rlvr.domains.code.harness.report import PARAMS, RunReport, authenticate, hidden_test_ids, interpret
from rlvr.domains.code.integrity import cases as integrity_cases
from rlvr.domains.code.integrity import probes as integrity_probes
from rlvr.domains.code.integrity import rules as integrity_rules
from rlvr.domains.code.settings import CodeSettings
from rlvr.domains.code.workspace import (
    CAND,
    JUDGE,
    candidate_files,
    entry_syntax_error,
    reference_files,
    shadowable,
    sibling_modules,
    task_code,
    test_imports,
    top_level,
)
from rlvr.sandbox.base import SandboxPool
from rlvr.sandbox.limits import for_task
from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.tasks.spec import Files, FinalState, Task
from rlvr.verify.base import VerifyContext, default_pool, derive_seed, settings_of
from rlvr.verify.parroting import parroting, prompt_literals
from rlvr.verify.verdict import Check, Verdict


class CodeVerifier:
    """Judges a final workspace with hidden tests, randomised cases, structural checks and integrity flags."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        t0 = time.perf_counter()
        s = settings_of(task, CodeSettings)
        files = candidate_files(task, final, s)
        timings: dict[str, float] = {}
        with _quiet_parse():
            found = self._static_flags(task, files, s)
        found.merge(self._links_out(final))
        timings["static"] = time.perf_counter() - t0
        pool = self.ctx.pool or default_pool()
        checks: list[Check] = []
        details: dict[str, Any] = {}
        seed = None
        expected = io_expected(task, s.io) if s.io is not None else None
        reference = reference_files(task, s)
        with _quiet_parse():
            diff = integrity_differential.prepare(task, s, files, reference, expected and expected["inputs"],
                                                  derive_seed(self.ctx.seed, "fresh", task.key))
        t1 = time.perf_counter()
        if s.cases is not None:
            seed = self.ctx.seed  # recorded in the verdict: the seed that replays these cases
            expected, err = draw_cases(pool, task, s, derive_seed(seed, "cases", task.key),
                                       diff.probes if diff else [])
            if err:
                return Verdict.infra(err, seed=seed, timings=timings)
            if diff is not None:
                diff.ref_probes = expected.get("extra", []) if expected else []
            timings["cases_reference"] = time.perf_counter() - t1
        if diff is not None and s.cases is None and reference is not None:
            # before the candidate's run, never beside it: nothing the candidate does can touch the
            # reference's
            seed = self.ctx.seed if diff.fresh else None  # the fresh inputs were drawn from it
            t1 = time.perf_counter()
            limits = for_task(pool, task, timeout_s=s.timeout_s, memory_mb=256)
            why, infra = integrity_differential.run_reference(pool, diff, reference, limits)
            timings["reference"] = time.perf_counter() - t1
            if why and infra:
                return Verdict.infra(why, seed=seed, timings=timings)
            if why:
                details["fresh_skipped"], diff, seed = why, None, None
        t1 = time.perf_counter()
        rep, err = self.run_harness(pool, task, files, s, expected, diff.harness_config() if diff else None)
        timings["sandbox"] = time.perf_counter() - t1
        if err:
            return Verdict.infra(err, seed=seed, timings=timings)
        found.merge(rep.findings)
        if s.tests:
            checks += self._test_checks(task, s, rep, details)
        general: list[tuple[bool, Any, Any]] = []
        calls: list[list[Any]] = []  # the arguments of each of `general`'s results
        if expected is not None:
            general = case_results(s, rep, expected)
            calls = [call_args(a) for a in expected["inputs"]]
            checks.append(cases_check(s, rep, expected, general))
            check_case_stream(rep, len(expected["inputs"]))
        fresh_check = None
        if diff is not None:
            fresh_check = diff.check(rep, 0.0, strict=s.io is not None)
            checks += [fresh_check] if fresh_check else []
            found.merge(diff.findings(rep, general))
            general, calls = diff.judged(rep) + general, diff.judged_inputs() + calls
        if general:
            spec = s.io or s.cases
            entry = diff.entry if diff else spec.entry if spec else ""
            found.merge(parroting([(g, w) for _, g, w in general], prompt_literals(task.prompt, _shown(task)),
                                  entry.partition(":")[0] + ".py", calls))
        if fresh_check is not None and s.cases is None:
            # the hidden tests and io cases: what the candidate could have seen or guessed, unlike fresh
            # inputs
            examples = [c for c in checks if not c.name.startswith(("fresh:", "check:"))]
            found.merge(integrity_probes.memorised(bool(examples) and all(c.passed for c in examples),
                                                   [ok for ok, _, _ in diff.judged(rep)], diff.entry))
        if s.checks:
            t1 = time.perf_counter()
            static_checks, err = run_static_checks(pool, s.checks, files, task)
            timings["checks"] = time.perf_counter() - t1
            if err:
                return Verdict.infra(err, seed=seed, timings=timings)
            checks += static_checks
        flags = found.flags()
        required = [c for c in checks if not c.name.startswith("check:") or _required(s, c)]
        # a pass needs something judged: a run whose every test was skipped, as allowed, proved nothing
        passed = bool(required) and all(c.passed for c in required) and not flags and any(
            c.weight > 0 for c in checks)
        total = sum(c.weight for c in checks)
        score = sum(c.score * c.weight for c in checks) / total if total > 0 else 0.0
        fresh = next((c for c in checks if c.name.startswith("fresh:")), None)
        # fresh inputs only take credit away: what the tests gave, scaled by their share
        if fresh is not None:
            score *= 1.0 - s.fresh.weight * (1.0 - fresh.score)
        broken_gates = [c.name for c in checks if c.name in s.gate and not c.passed]
        missing_gates = [g for g in s.gate if g not in {c.name for c in checks}]
        if broken_gates or missing_gates:
            score = 0.0
            passed = False
            details["gates_failed"] = (broken_gates + missing_gates)[:20]
        if rep.payload:
            details["output_tail"] = str(rep.payload.get("output_tail", ""))[-1500:]
        timings["total"] = time.perf_counter() - t0
        return Verdict(score=min(1.0, max(0.0, score)), passed=passed, checks=checks, flags=flags, seed=seed,
                       timings=timings, details=details)

    # ------------------------------------------------------------------------------------- integrity
    def _static_flags(self, task: Task, files: Files, s: CodeSettings) -> integrity.Findings:
        initial = task.workspace
        hidden_tests = {p: task.hidden[p] for p in s.tests}
        tested = shadowable(hidden_tests, initial)
        found = integrity.tampering(initial, files, (*task.protected, *s.read_only), tested)
        # a copy of a shipped file under another path (a link inside the workspace, read as what it leads to)
        # adds no code of the candidate's
        shipped_texts = set(initial.values())
        changed = {p: t for p, t in files.items()
                   if initial.get(p) != t and (p in initial or t not in shipped_texts)}
        test_names = {n.rsplit("::", 1)[-1] for n in hidden_test_ids(hidden_tests)[0]}
        test_names |= {Path(p).stem for p in hidden_tests} | {Path(p).name for p in hidden_tests}
        hidden_modules = top_level(p for p in task.hidden if p.endswith(".py")) - top_level(files)
        visible = {p: t for p, t in initial.items() if p.endswith(".py") and integrity.role_of(p) == "test"}

        def scan(sources: Files) -> integrity.Findings:
            # a main-guard block runs only as a program: not in the judge
            if not integrity.runs_programs(changed):
                sources = {p: integrity.without_main_guard(t) for p, t in sources.items()}
            out = integrity.scan_sources(sources, test_names, hidden_modules, tested)
            out.merge(integrity_cases.hard_coded_cases(sources, visible))
            out.merge(integrity_rules.scan(sources))
            return out
        # what the same files have as the task shipped them, or in the reference solution, is the task's own
        # code
        # (a real project's `except Exception:` or stack inspection), not the candidate's: only more of it
        # counts
        shipped = [initial, *([{**initial, **task.solution}] if task.solution else [])]
        found.merge(scan(changed).beyond(*(scan({p: src[p] for p in changed if p in src})
                                           for src in shipped)))
        if s.needs_change:
            found.merge(integrity.no_change(initial, files))
        return found

    @staticmethod
    def _links_out(final: FinalState) -> integrity.Findings:
        """Symbolic links the final workspace had out of it: refused (never read: the work is judged without
        them), and reaching outside the workspace all the same."""
        found = integrity.Findings()
        for path in final.refused:
            found.add("reaching_out", path, None,
                      "a symbolic link out of the workspace (refused, never read)", inert=True)
        return found

    # ---------------------------------------------------------------------------------------- harness
    def run_harness(self, pool: SandboxPool, task: Task, files: Files, s: CodeSettings,
                    expected: dict[str, Any] | None,
                    fresh: dict[str, Any] | None = None) -> tuple[RunReport, str | None]:
        """One run of the candidate's `files` under the trusted harness: the hidden tests, and the cases of
        `expected` (their inputs only: outputs never enter the sandbox) and `fresh` inputs; (report, the infra
        fault that kept it from running)."""
        with _quiet_parse():
            why = entry_syntax_error(files, s) if _same_interpreter(pool, task) else None
        if why is not None:  # the run would only import the entry module and report this: no sandbox needed
            return interpret(_import_failed(why, fresh is not None), set()), None
        key = secrets.token_hex(32)
        secret = {s.cases.generator, s.cases.reference} if s.cases else {s.io.file} if s.io else set()
        spec = s.cases or s.io
        judge_files = {p: t for p, t in task.hidden.items() if p not in secret}
        sandbox_files: dict[str, str | bytes] = {f"{CAND}/{p}": t for p, t in files.items()}
        sandbox_files.update({f"{JUDGE}/{p}": t for p, t in judge_files.items()})
        # a run without hidden tests needs no pytest config or case drawer
        lean = {SUPERVISOR, WORKER, VALUES, GUARDS}
        sandbox_files.update({f"{JUDGE}/{p}": t for p, t in harness_files().items() if s.tests or p in lean})
        sandbox_files.update({f"{JUDGE}/{p}": b for p, b in harness_bytecode().items()})
        sandbox_files.setdefault(f"{CAND}/.rlvr-keep", "")  # the candidate directory exists even when empty
        own = for_task(pool, task, timeout_s=s.timeout_s)  # the hidden run's: [sandbox] defaults < the task's
        timeout = own.timeout_s
        hidden_tests = {p: task.hidden[p] for p in s.tests}
        conftests = sorted(p for p in judge_files if p.rsplit("/", 1)[-1] == "conftest.py")
        workspace_names = top_level(files)
        siblings = {n: p for n, p in sibling_modules(judge_files, [*s.tests, *conftests]).items()
                    if n not in workspace_names}
        config = {
            "cand": CAND, "judge": JUDGE, "tests": s.tests, "timeout": timeout, "roots": s.import_roots,
            "pre_import": sorted(shadowable(hidden_tests, task.workspace, s)),
            # what the task's own environment provides of the rest is found there, before the workspace is
            # on the path; a new workspace module named like one of them shadows it
            "test_imports": sorted(test_imports(hidden_tests, task.workspace, s)),
            "new_tops": sorted(top_level(files) - top_level(task.workspace)),
            "conftests": conftests,
            "hidden_modules": sorted((top_level(p for p in judge_files if p.endswith(".py")) | set(siblings))
                                     - workspace_names),
            "siblings": siblings,
            "deselect": s.deselect,
            **task_code(task, files),
            "cases": {"entry": spec.entry, "inputs": expected["inputs"]} if spec and expected else None,
            "fresh": fresh,
        }
        # the supervisor outlives its worker by 10 s; pytest needs 256 MiB
        limits = for_task(pool, task, timeout_s=timeout + 10, memory_mb=max(own.memory_mb, 256))
        with pool.lease(sandbox_files) as sb:
            stdin = json.dumps(config) + "\n" + key + "\n"
            res = sb.run(["python", f"{JUDGE}/{SUPERVISOR}"], stdin=stdin, limits=limits,
                         read=[f"{JUDGE}/{p}" for p in judge_files])
        return self._read_result(res, key, judge_files,
                                 set(hidden_test_ids(hidden_tests)[1]) - set(s.deselect))

    def _read_result(self, res: ExecResult, key: str, judge_files: Files,
                     unconditional: set[str]) -> tuple[RunReport, str | None]:
        if res.status is ExecStatus.infra_error:
            return RunReport(payload=None), f"sandbox failed: {res.error or res.stderr[-300:]}"
        payload, forged = authenticate(res.stdout, key)
        if payload is None and "Traceback" in res.stderr and SUPERVISOR in res.stderr:
            return RunReport(payload=None), f"harness crashed: {res.stderr.strip().splitlines()[-1][:300]}"
        if payload is not None and not payload.get("messages"):  # the greeting precedes any candidate code
            tail = str(payload.get("output_tail", "")).strip().splitlines()
            return (RunReport(payload=None),
                    f"the harness's worker failed to start: {(tail or ['?'])[-1][:300]}")
        rep = interpret(payload, unconditional) if payload is not None else RunReport(payload=None)
        if forged:
            rep.findings.add("report_forgery", None, None,
                             f"{forged} forged result lines on the harness's output")
        if res.status in (ExecStatus.process_limit, ExecStatus.file_limit):
            rep.findings.add("resource_exhaustion", None, None,
                             f"the sandbox's cap was hit ({res.status.value})")
        if payload is None and res.status not in (ExecStatus.timeout, ExecStatus.memory_limit):
            rep.findings.add("exit_trick", None, None, f"the harness produced no result ({res.status.value})")
        for rel, text in judge_files.items():
            back = res.files.get(f"{JUDGE}/{rel}")
            if back is not None and back != text or back is None and res.files:
                rep.findings.add("tampering", f"hidden/{rel}", None,
                                 "hidden test material changed during the run")
        return rep, None

    def _test_checks(self, task: Task, s: CodeSettings, rep: RunReport,
                     details: dict[str, Any]) -> list[Check]:
        ids, _ = hidden_test_ids({p: task.hidden[p] for p in s.tests})
        ids = [i for i in ids if i not in s.deselect]
        # beside the tests read from the files: weighted ids, and every item the run collected from the hidden
        # files (a test a class inherits from a mixin in another module is known only once collected)
        for extra in [*s.weights, *(PARAMS.sub("", c) for c in rep.collected)]:
            if extra not in ids and extra not in s.deselect:
                ids.append(extra)
        # an allowed skip or expected failure proves nothing of the candidate's: it neither earns nor costs (a
        # test skipped on every attempt, broken code included, would otherwise pay its share for free)
        excused = {i for i in rep.collected if _item_excused(i, rep.outcomes.get(i), s)}
        judged = {tid: [c for c in rep.collected if c not in excused and (
            c == tid or (c.startswith(tid + "[") and c.endswith("]")))] for tid in ids}
        waived = {tid for tid in ids if not judged[tid] and any(
            c == tid or c.startswith(tid + "[") for c in excused)}
        total_w = sum(s.weights.get(i, 1.0) for i in ids if i not in waived) or 1.0
        checks = []
        for tid in ids:
            if tid in waived:
                checks.append(Check(name=tid, score=1.0, weight=0.0, passed=True,
                                    detail="skipped or expected to fail, as allowed: no share either way"))
                continue
            items = judged[tid]
            good = [i for i in items if rep.outcomes.get(i) == "passed"]
            slow = [i for i in good if tid in s.time_limits
                    and rep.durations.get(i, float("inf")) > s.time_limits[tid]]
            good = [i for i in good if i not in slow]
            score = len(good) / len(items) if items else 0.0
            if tid in s.weights and score < 1.0:  # a weighted test is a share, whole: all its cases or none
                score = 0.0
            detail = "not collected" if not items else next(
                (f"{i}: {rep.outcomes.get(i, 'not run')}: {rep.details.get(i, '')[-400:]}" for i in items
                 if i not in good and i not in slow), "")
            if slow:
                took = rep.durations.get(slow[0])
                detail = (f"{slow[0]}: took {took:.3f} s" if took is not None
                          else f"{slow[0]}: not timed") + \
                    f", over its limit of {s.time_limits[tid]:g} s (timed by the harness)"
            if not items and rep.collect_errors:
                detail = "not collected: " + rep.collect_errors[0][-400:]
            if rep.payload and rep.payload.get("timed_out") and score < 1:
                detail = "timed out; " + detail
            checks.append(Check(name=tid, score=score,
                                weight=s.tests_weight * s.weights.get(tid, 1.0) / total_w,
                                passed=bool(items) and score == 1.0, detail=detail))
        details["collected"] = len(rep.collected)
        return checks

    # ------------------------------------------------------------------------------------------ cases
def _shown(task: Task) -> list[Any]:
    """The expected results of the examples a procedural task shows in its prompt (`metadata["visible"]`)."""
    shown = task.metadata.get("visible")
    return [case[1] for case in shown if isinstance(case, (list, tuple)) and len(case) == 2] \
        if isinstance(shown, list) else []


_PARSE_LOCK = threading.Lock()


@contextmanager
def _quiet_parse() -> Iterator[None]:
    """Silence the SyntaxWarnings (`1if`, invalid escapes) that parsing candidate code on the host raises:
    they are the candidate's, and would otherwise land in the trainer's output. The lock keeps the
    process-wide warning filters consistent when verifications run in several threads."""
    with _PARSE_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        yield


def _item_excused(item: str, outcome: str | None, s: CodeSettings) -> bool:
    """Whether a collected item was skipped or failed as its task allows (allowed_skips, allowed_xfails)."""
    base = item.split("[", 1)[0]
    if outcome == "skipped":
        return item in s.allowed_skips or base in s.allowed_skips
    if outcome == "xfailed":
        return item in s.allowed_xfails or base in s.allowed_xfails
    return False


def _same_interpreter(pool: SandboxPool, task: Task) -> bool:
    """Whether the harness would run on this very interpreter (so a module that does not compile here does not
    compile there either): a local pool on `sys.executable`, for a task without requirements."""
    python = getattr(pool, "python", None)
    return not task.requirements and isinstance(python, str) and \
        os.path.realpath(python) == os.path.realpath(sys.executable)


def _import_failed(why: str, fresh: bool) -> dict[str, Any]:
    """The payload of a run without hidden tests whose entry module fails to import: the greeting, the import
    error for the cases (and the fresh inputs), the end, exactly as the harness's worker reports it."""
    messages: list[dict[str, Any]] = [{"t": "hello", "at": 0.0},
                                      {"t": "cases_error", "detail": why, "at": 0.0}]
    if fresh:
        messages.append({"t": "fresh_error", "detail": why, "at": 0.0})
    messages.append({"t": "end", "status": 0, "at": 0.0})
    return {"messages": messages, "timed_out": False, "malformed": 0, "exit_code": 0, "signal": None,
            "output_tail": "", "wall_s": 0.0, "caps": {}}


def _required(s: CodeSettings, c: Check) -> bool:
    kind = c.name.split(":", 2)[1]
    return any(sc.kind == kind and sc.is_required for sc in s.checks)


