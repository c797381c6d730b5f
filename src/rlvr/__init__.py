"""rlvr: reinforcement-learning post-training of language models with verifiable rewards.

The core (tasks, sandbox, envs, verify, schedule, store, monitor) imports without torch; training needs
`rlvr[train]`. The subpackages keep their names: `rlvr.verify` is the verification package (its entry point is
`rlvr.verify.verify`), `rlvr.tasks` the task package, and so on.
"""
from rlvr.config import RunConfig, load_config
from rlvr.envs.messages import Message, ToolCall
from rlvr.errors import InfraError, RlvrError, UserError
from rlvr.rollout.episode import Episode
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus
from rlvr.tasks.registry import make, names, register
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.verify.base import Verifier, VerifyContext
from rlvr.verify.verdict import Check, Evidence, Flag, Verdict

__version__ = "0.1.0"

__all__ = [
    "Check",
    "Episode",
    "Evidence",
    "ExecLimits",
    "ExecResult",
    "ExecStatus",
    "FinalState",
    "Flag",
    "InfraError",
    "Message",
    "RlvrError",
    "RunConfig",
    "Task",
    "TaskLimits",
    "ToolCall",
    "UserError",
    "Verdict",
    "Verifier",
    "VerifyContext",
    "__version__",
    "load_config",
    "make",
    "names",
    "register",
]
