"""smolagents on the episode's task, with one shell tool: `tool-calling` (ToolCallingAgent) or `code`
(CodeAgent with structured outputs, which asks for a JSON schema through `response_format`).

Run by `rlvr eval --agent smolagents` (or `smolagents-code`) on the agent venv's interpreter:
OpenAIServerModel reads the episode's gateway and key from OPENAI_BASE_URL and OPENAI_API_KEY; the final
answer is printed. """
import os
import subprocess
import sys

from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool


@tool
def shell(command: str) -> str:
    """Run a shell command in the task's workspace and return its output.

    Args:
        command: The shell command to run.
    """
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-8000:] or f"(exit {done.returncode})"


model = OpenAIServerModel(model_id=os.environ.get("RLVR_MODEL", "policy"),
                          api_base=os.environ["OPENAI_BASE_URL"],
                          api_key=os.environ["OPENAI_API_KEY"])
steps = int(os.environ.get("RLVR_MAX_TURNS", "20"))
if sys.argv[1:] == ["code"]:
    agent = CodeAgent(tools=[shell], model=model, max_steps=steps, use_structured_outputs_internally=True)
else:
    agent = ToolCallingAgent(tools=[shell], model=model, max_steps=steps)
print(agent.run(open(os.environ["RLVR_PROMPT_FILE"]).read()))
