"""Whose fault a failed verification of the c and sql domains is, over an in-process pool double that plays
their trusted scripts: a toolchain or a server that fails before the candidate's code runs, a sandbox that
fails and a script that ends without a word are infra faults (masked, never 0); a candidate that does not
compile, whose SQL errs, or that kills the supervisor scores 0; a result line not signed with the
verification's key never counts; a sql judge that errs on its own is infra."""
from __future__ import annotations

import json

import pytest

from rlvr.sandbox.fake import FakeCall, FakePool
from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState
from rlvr.verify.base import VerifyContext, verify
from rlvr.verify.signed import sign


def signed(mark: str, payload: dict, forge: bool = False):
    """A handler that answers like the trusted script: one line signed with the key it read on stdin."""
    def handler(call: FakeCall) -> str:
        config, key = call.stdin.decode().split("\n")[:2]
        json.loads(config)
        body = json.dumps(payload)
        return f"{mark} {sign('not the key' if forge else key, body)} {body}\n"
    return handler


def _c(handler) -> object:
    task = registry.make("c", families=("path_join",), tier="easy").get(0)
    final = FinalState(files={**task.workspace, **task.solution})
    return verify(task, final, VerifyContext(pool=FakePool(handler)))


def _sql(handler) -> object:
    task = registry.make("sql", templates=("email_coverage",), tier="easy").get(0)
    return verify(task, FinalState(files={**task.workspace, **task.solution}),
                  VerifyContext(pool=FakePool(handler)))


def test_c_a_harness_that_does_not_compile_is_the_toolchains() -> None:
    v = _c(signed("RLVR-C-RESULT", {"fault": "toolchain", "build": {"harness": {"rc": 4,
                                                                                "log": "cc1: ICE"}}}))
    assert v.infra_error and "did not compile" in v.infra_error and v.score == 0.0


def test_c_sources_that_do_not_compile_are_the_candidates() -> None:
    v = _c(signed("RLVR-C-RESULT", {"fault": "candidate", "build": {"harness": {"rc": 0},
                                                                    "candidate": {"rc": 1,
                                                                                  "log": "error: x"}}}))
    assert v.infra_error is None and v.score == 0.0 and "do not compile" in v.checks[0].detail


@pytest.mark.parametrize("answer, infra", [
    (ExecResult(status=ExecStatus.infra_error, error="worker lost"), True),
    (ExecResult(status=ExecStatus.ok, exit_code=0, stdout=""), True),
    (ExecResult(status=ExecStatus.exit_nonzero, signal=9), False),
])
def test_c_a_sandbox_failure_is_infra_a_killed_supervisor_the_candidates(answer: ExecResult,
                                                                         infra: bool) -> None:
    v = _c(lambda call: answer)
    assert bool(v.infra_error) == infra
    if not infra:
        assert v.score == 0.0 and "sabotage" in {f.kind for f in v.flags}


def test_c_a_result_line_with_the_wrong_key_never_counts() -> None:
    v = _c(signed("RLVR-C-RESULT", {"fault": None, "build": {}, "cases": []}, forge=True))
    assert v.infra_error and "no result" in v.infra_error


def test_sql_a_server_that_does_not_start_or_a_failing_reference_is_infra() -> None:
    for why in ("PostgreSQL did not start: FATAL: could not create shared memory segment",
                "the reference failed on dataset 1: 42P01: relation does not exist"):
        v = _sql(signed("RLVR-SQL-RESULT", {"infra": why, "datasets": []}))
        assert v.infra_error and why in v.infra_error


def test_sql_an_erring_query_is_the_candidates() -> None:
    ref = {"ok": True, "rows": [["DE", ["n", "2"], ["n", "1"]]], "columns": 3}
    bad = {"ok": False, "error": "42601: syntax error at or near \"SELEC\""}
    v = _sql(signed("RLVR-SQL-RESULT", {"start_ms": 90.0, "datasets": [{"reference": ref,
                                                                        "candidate": bad}] * 3}))
    assert v.infra_error is None and v.score == 0.0 and "syntax error" in v.checks[0].detail
    assert v.timings["postgres_start"] == pytest.approx(0.09)


@pytest.mark.parametrize("answer, infra", [
    (ExecResult(status=ExecStatus.exit_nonzero, exit_code=1,
                stderr="Traceback ...\nFileNotFoundError: 'pg-start'"), True),
    (ExecResult(status=ExecStatus.ok, exit_code=0, stdout=""), True),
    (ExecResult(status=ExecStatus.timeout), False),
    (ExecResult(status=ExecStatus.memory_limit, signal=9), False),
])
def test_sql_a_judge_that_errs_is_infra_a_query_that_drives_it_past_its_limits_the_candidates(
        answer: ExecResult, infra: bool) -> None:
    v = _sql(lambda call: answer)
    assert bool(v.infra_error) == infra, v
    if infra:
        assert "gave no result" in v.infra_error
    else:
        assert v.score == 0.0 and "ended early" in v.checks[0].detail
