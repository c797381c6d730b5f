"""The verification protocol over the in-process pool (no podman): what the lease holds (/tests read-only, a
fresh /logs, the agent's final state applied by difference), where the reward is read from, and what each
outcome of tests/test.sh scores. The same runs in real images are in test_harbor_images.py."""
from __future__ import annotations

from pathlib import Path

from rlvr.domains.harbor.format import load_task
from rlvr.domains.harbor.verifier import apply_state, artifact_scope, script_argv
from rlvr.sandbox.fake import FakeCall, FakePool
from rlvr.sandbox.result import ExecResult, ExecStatus
from rlvr.tasks.spec import FinalState
from rlvr.verify.base import VerifyContext, verify

TASKS = Path(__file__).resolve().parents[2] / "assets" / "harbor" / "tasks"
GREETING = "Hello, world!\n"


def _hello_tests(call: FakeCall) -> ExecResult | str:
    """tests/test.sh of the hello task, as the fake pool plays it."""
    if call.argv[:2] != ["sh", "-c"] or "/tests/test.sh" not in call.argv[2]:
        return ""
    ok = call.files.get("hello.txt") == GREETING.encode()
    call.scratch["/logs"]["verifier/reward.txt"] = b"1\n" if ok else b"0\n"
    return "ran the tests\n"


def test_the_tests_run_in_a_fresh_lease_of_the_agents_image_with_tests_and_a_fresh_logs() -> None:
    pool = FakePool(_hello_tests)
    task = load_task(TASKS / "hello")
    verdict = verify(task, FinalState(files={"hello.txt": GREETING}), VerifyContext(pool=pool))
    assert verdict.score == 1.0 and verdict.passed and not verdict.infra_error
    (call,) = pool.calls
    assert call.image == f"dockerfile:{TASKS / 'hello' / 'environment'}" and call.network is False
    assert call.mounts["/tests"]["test.sh"] == (TASKS / "hello" / "tests" / "test.sh").read_bytes()
    assert set(call.scratch) == {"/logs"} and call.limits.timeout_s == 60.0  # [verifier] timeout_sec
    assert "exec /bin/bash /tests/test.sh" in call.argv[2] and "mkdir -p /logs/verifier" in call.argv[2]
    assert verify(task, FinalState(files={"hello.txt": "Hello\n"}), VerifyContext(pool=pool)).score == 0.0


def test_a_reward_file_the_agent_wrote_is_never_read() -> None:
    def tests_write_nothing(call: FakeCall) -> str:
        return ""

    task = load_task(TASKS / "hello")
    planted = {"hello.txt": "nope\n", "reward.txt": "1\n", "logs/verifier/reward.txt": "1\n",
               "logs/verifier/reward.json": '{"reward": 1}'}
    verdict = verify(task, FinalState(files=planted), VerifyContext(pool=FakePool(tests_write_nothing)))
    assert verdict.score == 0.0 and not verdict.passed and verdict.infra_error is None
    assert "wrote no reward" in verdict.checks[0].detail


def test_each_outcome_of_the_tests_scores_as_documented() -> None:
    task = load_task(TASKS / "partial")
    outcomes = {
        "timeout": (ExecResult(status=ExecStatus.timeout), 0.0, "timeout_sec"),
        "garbage": (b"1 point", 0.0, "not a number"),
        "half": (b'{"greeting": 1, "punctuation": 0}', 0.5, ""),
    }
    for name, (answer, score, detail) in outcomes.items():
        def tests(call: FakeCall, answer: object = answer) -> ExecResult | str:
            if isinstance(answer, ExecResult):
                return answer
            name = "verifier/reward.json" if answer.startswith(b"{") else "verifier/reward.txt"
            call.scratch["/logs"][name] = answer
            return ""

        verdict = verify(task, FinalState(files={}), VerifyContext(pool=FakePool(tests)))
        assert verdict.score == score and verdict.infra_error is None, name
        assert detail in verdict.checks[0].detail, (name, verdict.checks)
    call = []
    verify(task, FinalState(files={}), VerifyContext(pool=FakePool(lambda c: call.append(c) or "")))
    assert "export EXPECTED_GREETING=Hello;" in call[0].argv[2]  # [verifier] env
    infra = verify(task, FinalState(files={}), VerifyContext(pool=FakePool(
        lambda c: ExecResult(status=ExecStatus.infra_error, error="worker lost"))))
    assert infra.infra_error and "worker lost" in infra.infra_error  # masked, never a 0


def test_the_final_state_is_applied_by_difference() -> None:
    def rm(call: FakeCall) -> str:
        if call.argv[:2] == ["xargs", "-0"]:
            for path in call.stdin.decode().split("\0"):
                call.files.pop(path, None)
        return ""

    pool = FakePool(rm)
    seed = {"keep.bin": b"\x00\xffdata", "gone.txt": "x", "same.txt": "s", "edit.txt": "old"}
    with pool.lease(seed) as sb:
        apply_state(sb, {"keep.bin": "\x00\ufffddata", "same.txt": "s", "edit.txt": "new", "add.txt": "a"})
        assert sb.files == {"keep.bin": b"\x00\xffdata", "same.txt": b"s", "edit.txt": b"new",
                            "add.txt": b"a"}
    with pool.lease(seed) as sb:  # a separate verifier's artifacts: only their own paths change
        apply_state(sb, {"edit.txt": "new"}, scope=["edit.txt", "gone.txt"])
        assert sb.files == {"keep.bin": b"\x00\xffdata", "same.txt": b"s", "edit.txt": b"new"}


def test_a_separate_verifier_gets_its_own_image_and_only_the_artifacts() -> None:
    def tests(call: FakeCall) -> str:
        if call.argv == ["pwd"]:
            return "/app\n"
        if "/tests/test.sh" in " ".join(call.argv):
            ok = call.files == {"out.txt": b"42\n"}
            call.scratch["/logs"]["verifier/reward.txt"] = b"1" if ok else b"0"
        return ""

    pool = FakePool(tests)
    task = load_task(TASKS / "separate")
    final = FinalState(files={"out.txt": "42\n", "scratch.txt": "x"})
    verdict = verify(task, final, VerifyContext(pool=pool))
    assert verdict.score == 1.0
    images = [c.image for c in pool.calls]
    verifier = f"dockerfile:{TASKS / 'separate' / 'tests'}"
    assert images == [f"dockerfile:{TASKS / 'separate' / 'environment'}", verifier, verifier]  # WORKDIR first
    assert artifact_scope(("/app/out.txt", "/logs/artifacts", "/app"), "/app") == ["out.txt", ""]


def test_a_script_runs_by_its_own_interpreter_line() -> None:
    assert script_argv("/t/test.sh", "#!/usr/bin/env python3") == ["/usr/bin/env", "python3", "/t/test.sh"]
    assert script_argv("/tests/test.sh", "echo hi") == ["bash", "/tests/test.sh"]
