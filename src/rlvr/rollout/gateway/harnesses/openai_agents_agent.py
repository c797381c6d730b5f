"""The OpenAI Agents SDK's default `Agent` (the Responses API) on the episode's task, with one shell tool.

Run by `rlvr eval --agent openai-agents` on the agent venv's interpreter: the SDK's own client reads
OPENAI_BASE_URL and OPENAI_API_KEY (the episode's gateway and key); the final output is the answer.
"""
import os
import subprocess

from agents import Agent, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)  # no traces sent anywhere (nor could they be: no network but the gateway)


@function_tool
def shell(command: str) -> str:
    """Run a shell command in the task's workspace and return its output."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-8000:] or f"(exit {done.returncode})"


agent = Agent(name="solver", model=os.environ.get("RLVR_MODEL", "policy"), tools=[shell],
              instructions="Solve the task in the current directory; run commands with the shell tool.")
result = Runner.run_sync(agent, open(os.environ["RLVR_PROMPT_FILE"]).read(),
                         max_turns=int(os.environ.get("RLVR_MAX_TURNS", "30")))
print(result.final_output)
