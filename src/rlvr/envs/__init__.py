"""How the model acts: Env (reset/step), tools, budgets, and the conversation records (Message, ToolCall)."""
from rlvr.envs.env import Budgets, Env, Observation, StepResult
from rlvr.envs.messages import Message, ToolCall
from rlvr.envs.tools import TOOLS, Tool, ToolContext, ToolOutput, call_tool

__all__ = ["TOOLS", "Budgets", "Env", "Message", "Observation", "StepResult", "Tool", "ToolCall",
           "ToolContext",
           "ToolOutput", "call_tool"]
