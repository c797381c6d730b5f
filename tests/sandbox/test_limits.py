"""The limits resolver: layers merge per field in order, budgets and requests only lower, unset fields are
left alone, and the `[sandbox]` defaults reach every command (tool calls and verifier runs)."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from rlvr.config import SandboxConfig
from rlvr.domains.code.verifier import CodeVerifier
from rlvr.envs.env import Env
from rlvr.envs.messages import Message
from rlvr.sandbox import limits_from, make_pool
from rlvr.sandbox.fake import FakeCall, FakePool
from rlvr.sandbox.limits import defaults_of, for_task, merged, resolve, task_layer
from rlvr.sandbox.result import ExecLimits, ExecStatus
from rlvr.sandbox.unsafe import UnsafePool
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.verify.base import VerifyContext

DEFAULTS = ExecLimits(timeout_s=10.0, memory_mb=512, processes=64, output_bytes=1 << 20)


# ------------------------------------------------------------------------------------------ the resolver
def test_layers_merge_per_field_in_order() -> None:
    got = resolve(DEFAULTS, task=ExecLimits(timeout_s=30.0, memory_mb=256), budget=ExecLimits(timeout_s=20.0),
                  request=ExecLimits(processes=8))
    # the task raised the timeout and lowered memory, the budget then lowered the timeout, the request
    # processes
    assert got == DEFAULTS.model_copy(update={"timeout_s": 20.0, "memory_mb": 256, "processes": 8})


def test_a_task_may_raise_but_budgets_and_requests_only_lower() -> None:
    assert resolve(DEFAULTS, task={"memory_mb": 4096}).memory_mb == 4096
    assert resolve(DEFAULTS, budget={"memory_mb": 4096}).memory_mb == 512
    assert resolve(DEFAULTS, request={"output_bytes": 1 << 30}).output_bytes == 1 << 20
    # a request never gets back what a budget took away, nor what the task lowered
    assert resolve(DEFAULTS, budget={"timeout_s": 5.0}, request={"timeout_s": 8.0}).timeout_s == 5.0
    assert resolve(DEFAULTS, task={"processes": 4}, request={"processes": 16}).processes == 4
    assert resolve(DEFAULTS, task={"timeout_s": 60.0}, request={"timeout_s": 2.0}).timeout_s == 2.0


def test_unset_fields_are_left_alone() -> None:
    assert resolve(DEFAULTS) == DEFAULTS
    assert resolve(DEFAULTS, task=ExecLimits(), budget={}, request=None) == DEFAULTS
    # an ExecLimits counts only the fields it was built with, a mapping only its non-None values
    partial = resolve(DEFAULTS, task=ExecLimits(timeout_s=3.0), request={"memory_mb": None, "processes": 9})
    assert partial == DEFAULTS.model_copy(update={"timeout_s": 3.0, "processes": 9})
    # a resolved ExecLimits sets every field
    assert resolve(DEFAULTS).model_fields_set == set(ExecLimits.model_fields)


def test_cpu_seconds_unset_is_no_cap_of_its_own() -> None:
    assert resolve(DEFAULTS, request={"cpu_s": 4.0}).cpu_s == 4.0
    assert resolve(DEFAULTS, task={"cpu_s": 2.0}, request={"cpu_s": 4.0}).cpu_s == 2.0


def test_a_bad_layer_value_raises() -> None:
    with pytest.raises(ValidationError):
        resolve(DEFAULTS, request={"timeout_s": -1})
    with pytest.raises(ValidationError):
        resolve(DEFAULTS, task={"timeout": 1})


def _task(**limits: object) -> Task:
    return Task(id="t", domain="toy", limits=TaskLimits(**limits))


def test_the_task_layer_holds_only_what_the_task_sets() -> None:
    assert task_layer(_task(max_turns=3)).model_fields_set == set()
    assert task_layer(_task(exec_timeout_s=30.0)) == ExecLimits(timeout_s=30.0)
    assert task_layer(_task(exec_timeout_s=30.0)).model_fields_set == {"timeout_s"}
    assert task_layer(_task(memory_mb=1024)).model_fields_set == {"memory_mb"}
    # a scheduler's budget copy keeps the fields the task left unset unset
    task = _task(max_turns=3)
    budgeted = task.model_copy(update={"limits": task.limits.model_copy(update={"max_tokens": 64})})
    assert task_layer(budgeted).model_fields_set == set()
    # a task sent to another node (Ray) or restored from a checkpoint asks for the same limits
    for t in (task, _task(exec_timeout_s=30.0)):
        assert task_layer(Task.model_validate_json(t.model_dump_json())) == task_layer(t)
    # what a verifier derives goes over the task's; None leaves the task's
    assert task_layer(_task(exec_timeout_s=30.0), timeout_s=40.0,
                      processes=None) == ExecLimits(timeout_s=40.0)


def test_for_task_starts_from_the_pools_defaults() -> None:
    pool = FakePool(limits=ExecLimits(timeout_s=3.0, processes=8))
    assert for_task(pool, _task(max_turns=2)) == resolve(pool.limits)
    assert for_task(pool, _task(exec_timeout_s=30.0), request={"processes": 4}) == pool.limits.model_copy(
        update={"timeout_s": 30.0, "processes": 4})
    assert defaults_of(object()) == ExecLimits()  # a duck-typed double without defaults


# ------------------------------------------------------------------------------------- pools merge per field
def test_a_pool_lays_a_callers_limits_over_its_defaults() -> None:
    defaults = ExecLimits(timeout_s=3.0, processes=8, output_bytes=2048)
    assert merged(defaults, None) is defaults
    assert merged(defaults, ExecLimits(memory_mb=128)) == defaults.model_copy(update={"memory_mb": 128})
    assert merged(defaults, ExecLimits(timeout_s=1.0, memory_mb=64, processes=4, output_bytes=1024,
                                       cpu_s=1.0, file_size_mb=1, workspace_mb=1,
                                       open_files=16)).processes == 4
    pool = FakePool(limits=defaults)
    pool.run(["x"], limits=ExecLimits(timeout_s=60.0))
    with pool.lease() as sb:
        sb.run(["y"])
    assert [c.limits for c in pool.calls] == [defaults.model_copy(update={"timeout_s": 60.0}), defaults]


def test_the_unisolated_pool_keeps_its_output_cap_under_partial_limits() -> None:
    pool = UnsafePool(limits_from(SandboxConfig(output_bytes=1024)), warn=False)
    r = pool.run(["python", "-c", "print('y' * 5000)"], limits=ExecLimits(timeout_s=20.0))
    assert r.stdout_truncated and len(r.stdout) == 1024


def test_the_isolated_pool_keeps_its_output_cap_under_partial_limits() -> None:
    with make_pool(SandboxConfig(workers=1, output_bytes=2048), spares=0) as pool:
        r = pool.run(["python", "-c", "print('y' * 50000)"], limits=ExecLimits(timeout_s=20.0))
    assert r.status is ExecStatus.output_limit and r.stdout_truncated and len(r.stdout) <= 2048


# ----------------------------------------------------------------- the [sandbox] defaults reach every command
FIELDS = [("timeout_s", 7.5), ("memory_mb", 300), ("processes", 9), ("output_bytes", 4096)]
"""One value per `[sandbox]` limit field, unlike the defaults of ExecLimits and TaskLimits."""


@pytest.mark.parametrize("field, value", FIELDS)
def test_a_sandbox_default_reaches_a_tool_call(field: str, value: float) -> None:
    pool = FakePool(lambda call: "ok\n", limits=limits_from(SandboxConfig(**{field: value})))
    task = Task(id="m", domain="toy", prompt="p", workspace={"a.py": ""}, limits=TaskLimits(max_turns=3))
    with Env(pool) as env:
        env.reset(task)
        call = {"name": "run", "arguments": {"command": "true"}}
        res = env.step(Message(role="assistant", content=f"<tool_call>{json.dumps(call)}</tool_call>"))
    assert res.messages[0].exec_status == "ok"
    run, sweep = pool.calls  # the command, then the sweep of links it left out of the workspace
    assert run.argv == ["sh", "-c", "true"] and getattr(run.limits, field) == value
    assert sweep.argv[:2] == ["bash", "-c"] and getattr(sweep.limits, field) == value


def _code_task(**limits: object) -> Task:
    return Task(id="add", domain="code", workspace={"m.py": "def add(a, b):\n    return 0\n"},
                hidden={"test_m.py": "from m import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"},
                verifier={"tests": ["test_m.py"]}, limits=TaskLimits(**limits))


def _verified(pool: FakePool, task: Task) -> FakeCall:
    final = FinalState(files={"m.py": "def add(a, b):\n    return a + b\n"})
    CodeVerifier(VerifyContext(pool=pool)).verify(task, final)
    [run] = pool.calls  # the trusted harness's one run (its output is not a report here: never mind)
    return run


@pytest.mark.parametrize("field, value", FIELDS)
def test_a_sandbox_default_reaches_a_verification(field: str, value: float) -> None:
    pool = FakePool(lambda call: "", limits=limits_from(SandboxConfig(**{field: value})))
    run = _verified(pool, _code_task())
    if field == "timeout_s":  # the hidden tests get the default; the supervisor 10 s of grace beyond them
        assert json.loads(run.stdin.decode().splitlines()[0])["timeout"] == value
        assert run.limits.timeout_s == value + 10
    else:
        assert getattr(run.limits, field) == value


def test_a_tasks_own_limits_win_over_the_sandbox_defaults() -> None:
    pool = FakePool(lambda call: "", limits=limits_from(SandboxConfig(timeout_s=7.5, memory_mb=300)))
    run = _verified(pool, _code_task(exec_timeout_s=30.0, memory_mb=1024))
    assert (run.limits.timeout_s, run.limits.memory_mb) == (40.0, 1024)
