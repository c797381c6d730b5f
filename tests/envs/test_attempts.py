"""Attempts tasks in the Env: each turn an answer checked by the domain's feedback, what failed said back (or
only "wrong"), the episode ends on a pass or when the attempts are spent, never through tools."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlvr.envs.env import Env
from rlvr.envs.feedback import BLANK, MAX_FAILURES, Check, Failure, message
from rlvr.errors import InfraError, UserError
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain
from rlvr.tasks.source import ListSource
from rlvr.tasks.spec import Task, TaskLimits

CALLS: list[str] = []
FAULTS: list[int] = [0]


def guess_feedback(pool: object, task: Task, answer: str) -> Check:
    """The toy domain's check: the answer must be the task's letter; the failure names it."""
    CALLS.append(answer)
    if FAULTS[0] > 0:
        FAULTS[0] -= 1
        raise InfraError("checker died")
    if answer.strip() == task.answer:
        return Check(passed=True)
    return Check(passed=False, failures=(Failure(call="guess()", expected=repr(task.answer),
                                                 got=f"returned {answer.strip()!r}"),))


@pytest.fixture
def guess() -> Iterator[None]:
    registry.register(Domain("guess-env", lambda _cfg: ListSource([]), feedback=guess_feedback))
    registry.register(Domain("silent-env", lambda _cfg: ListSource([])))
    CALLS.clear()
    FAULTS[0] = 0
    yield
    registry.unregister("guess-env")
    registry.unregister("silent-env")


def task(attempts: int = 3, max_tokens: int = 100, domain: str = "guess-env") -> Task:
    return Task(id="g", domain=domain, prompt="guess", answer="x", attempts=True,
                limits=TaskLimits(max_turns=attempts, max_tokens=max_tokens))


def test_an_attempts_task_answers_without_tools_or_a_sandbox(guess: None) -> None:
    t = task()
    assert t.attempts and not t.multi_turn and t.turns == 3
    with Env(None) as env:  # no pool: nothing is leased
        obs = env.reset(t)
        assert [m.role for m in obs.messages] == ["user"] and obs.tools == []
        assert env.sandbox is None and env.budgets.max_turns == 3


def test_a_wrong_answer_is_told_what_failed_and_a_right_one_ends_the_episode(guess: None) -> None:
    with Env(None) as env:
        env.reset(task())
        res = env.step("w", num_tokens=2)
        assert not res.terminated and not res.truncated and res.info == {"attempt_passed": False}
        assert [m.role for m in res.messages] == ["user"]
        assert res.messages[0].content == "guess()='x' expected, returned 'w'"
        res = env.step("x", num_tokens=2)
        assert res.terminated and not res.truncated and res.messages == [] and res.info["attempt_passed"]
        assert env.final_state().answer == "x" and CALLS == ["w", "x"]


def test_the_last_attempt_terminates_unchecked_and_is_judged_as_it_is(guess: None) -> None:
    with Env(None) as env:
        env.reset(task(attempts=2))
        assert not env.step("w").terminated
        res = env.step("y")
        # the budget of attempts is the task's rule, not a cut: terminated; nothing more will be said, so the
        # env runs no check (the verifier judges it)
        assert res.terminated and not res.truncated and res.truncated_by is None and res.messages == []
        assert res.info == {"attempt_passed": None} and env.final_state().answer == "y"
        assert CALLS == ["w"]


def test_blank_feedback_says_only_wrong(guess: None) -> None:
    with Env(None, feedback="blank") as env:
        env.reset(task())
        assert env.step("w").messages[0].content == BLANK == "wrong"
        assert env.step("x").terminated  # the check itself is the same


def test_a_spent_token_budget_truncates(guess: None) -> None:
    with Env(None) as env:
        env.reset(task(max_tokens=10))
        res = env.step("w", num_tokens=10)
        assert res.truncated and res.truncated_by == "tokens" and not res.terminated
        assert res.info == {"attempt_passed": None} and CALLS == []


def test_a_turn_override_sets_the_budget_of_attempts(guess: None) -> None:
    with Env(None, max_turns=1) as env:
        env.reset(task(attempts=3))
        assert env.step("w").terminated and CALLS == []


def test_a_domain_without_feedback_is_a_user_error(guess: None) -> None:
    with Env(None) as env:
        env.reset(task(domain="silent-env"))
        with pytest.raises(UserError, match="cannot check the answers"):
            env.step("w")


def test_an_infra_fault_of_the_check_is_retried_then_raised(guess: None) -> None:
    FAULTS[0] = 1
    with Env(None, infra_retries=1) as env:
        env.reset(task())
        assert env.step("x").terminated and env.retries_used == 1
    FAULTS[0] = 2
    with Env(None, infra_retries=1) as env:
        env.reset(task())
        with pytest.raises(InfraError, match="checker died"):
            env.step("x")


def test_message_forms() -> None:
    fail = Failure(call="f([1,2])", expected="2", got="returned 1")
    assert message(Check(passed=False, failures=(fail,))) == "f([1,2])=2 expected, returned 1"
    assert message(Check(passed=False, failures=(fail,)), "blank") == "wrong"
    assert message(Check(passed=False, error="SyntaxError: invalid syntax")) == "SyntaxError: invalid syntax"
    many = message(Check(passed=False, failures=(fail,) * (MAX_FAILURES + 2)))
    assert many.splitlines()[-1] == "(and 2 more failed)" and len(many.splitlines()) == MAX_FAILURES + 1
    assert message(Check(passed=False)) == BLANK  # nothing to say: it was wrong
