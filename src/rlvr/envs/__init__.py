"""How the model acts: Env (reset/step), tools, budgets."""
from rlvr.envs.env import Budgets, Env, Observation, StepResult
from rlvr.envs.tools import TOOLS, Tool, ToolContext, ToolOutput, call_tool

__all__ = ["TOOLS", "Budgets", "Env", "Observation", "StepResult", "Tool", "ToolContext", "ToolOutput", "call_tool"]
