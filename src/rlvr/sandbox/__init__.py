"""Where it is practised: the Sandbox protocol, isolated local backend, warm pool, limits."""
from rlvr.sandbox.base import FileMap, Sandbox, SandboxPool
from rlvr.sandbox.result import ExecLimits, ExecResult, ExecStatus

__all__ = ["ExecLimits", "ExecResult", "ExecStatus", "FileMap", "Sandbox", "SandboxPool"]
