"""The verifiers taskset `rlvr-tasks` (`vf-eval rlvr-tasks --env.taskset.tasks SPEC`).

verifiers loads a taskset by id as a top-level module (`rlvr-tasks` -> `rlvr_tasks`) exporting its Taskset,
Harness and Env through `__all__`; they live in `rlvr.integrations.verifiers`. Needs `pip install
rlvr[verifiers]`.
"""
from rlvr.integrations.verifiers import RlvrEnv, RlvrHarness, RlvrTaskset

__all__ = ["RlvrEnv", "RlvrHarness", "RlvrTaskset"]
