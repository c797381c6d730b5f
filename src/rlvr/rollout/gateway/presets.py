"""Named agent harnesses for `rlvr eval --agent NAME` (and `[agent] command = "NAME"`): each runs unmodified
in the episode's sandbox, pointed at the gateway by its own base-URL setting.

    name            API                 runs                                       installed by
    claude-code     Anthropic Messages  Claude Code's CLI (npm), print mode        make harness-node
    codex           OpenAI Responses    Codex's CLI (npm), `codex exec`            make harness-node
    openai-agents   OpenAI Responses    the OpenAI Agents SDK's default Agent      make agent-venv
    mini-swe-agent  chat completions    mini-swe-agent's `mini` (through litellm)  make agent-venv
    smolagents      chat completions    smolagents' ToolCallingAgent               make agent-venv
    smolagents-code chat completions    smolagents' CodeAgent, structured outputs  make agent-venv

A preset fills what `[agent]` leaves at its defaults: the command (with the environment the harness needs),
the directory mounted as $RLVR_AGENT_DIR (the npm install, or the driver scripts of `harnesses/`), the
interpreter (the agent venv) and the memory limit. The installs live under `$RLVR_CACHE/harnesses` (default
`~/.cache/rlvr/harnesses`), outside any clone; a preset whose install is missing is one line naming the make
target. """
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlvr.errors import UserError
from rlvr.rollout.policies.builtin import cache_dir

if TYPE_CHECKING:
    from rlvr.config import AgentConfig

SCRIPTS = Path(__file__).with_name("harnesses")
"""The driver scripts of the Python harnesses (each a few lines a team would write around the library)."""
PROMPT = '"$(cat "$RLVR_PROMPT_FILE")"'


@dataclass(frozen=True)
class Preset:
    """One harness: how it runs in the sandbox."""

    name: str
    api: str
    """The API it speaks through the gateway."""
    command: str
    """The shell command, run in the task's workspace (environment assignments first)."""
    runtime: str
    """node (the npm install is the agent directory) or python (the agent venv runs a driver script)."""
    memory_mb: int = 2048


def harness_root() -> Path:
    return cache_dir() / "harnesses"


CODEX_PROVIDER = ('model_providers.rlvr={name="rlvr",base_url="\'"$OPENAI_BASE_URL"\'",'
                  'env_key="OPENAI_API_KEY",wire_api="responses"}')
PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("claude-code", "messages",
           "DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 "
           f"$RLVR_AGENT_DIR/node_modules/.bin/claude -p {PROMPT} --model policy "
           "--dangerously-skip-permissions",
           "node", memory_mb=4096),
    Preset("codex", "responses",
           # node's launcher reads no OpenSSL configuration (the sandbox's /etc has none it may read)
           'mkdir -p /tmp/.codex && OPENSSL_CONF=/dev/null CODEX_HOME=/tmp/.codex '
           '$RLVR_AGENT_DIR/node_modules/.bin/codex exec '
           "--skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -m policy "
           "-c model_provider=rlvr "
           f"-c '{CODEX_PROVIDER}' -c web_search=disabled -c features.multi_agent=false {PROMPT}",
           "node", memory_mb=4096),
    Preset("openai-agents", "responses", "python $RLVR_AGENT_DIR/openai_agents_agent.py", "python"),
    Preset("mini-swe-agent", "chat",
           "MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_CONFIGURED=true "
           f"python -m minisweagent.run.mini -m openai/policy -t {PROMPT} --yolo --exit-immediately -l 0 "
           "-o /tmp/trajectory.json",
           "python"),
    Preset("smolagents", "chat", "python $RLVR_AGENT_DIR/smolagents_agent.py tool-calling", "python"),
    Preset("smolagents-code", "chat", "python $RLVR_AGENT_DIR/smolagents_agent.py code", "python"),
)}
"""Every preset, by name."""

INSTALLS = {"node": ("node", "make harness-node"), "python": ("agent-venv", "make agent-venv")}
"""Runtime -> (its directory under harness_root(), the make target that installs it)."""


def resolve(cfg: AgentConfig) -> AgentConfig:
    """`cfg` with a preset's command, directory, interpreter and memory filled in, when its command names
    one (fields the user set are kept); any other command as it is."""
    preset = PRESETS.get(cfg.command.strip())
    if preset is None:
        return cfg
    sub, target = INSTALLS[preset.runtime]
    install = harness_root() / sub
    if preset.runtime == "node":
        ready, update = (install / "node_modules" / ".bin").is_dir(), {"dir": str(install)}
    else:
        ready = (install / "bin" / "python").is_file() or cfg.python is not None
        update = {"dir": str(SCRIPTS), "python": cfg.python or str(install)}
    if not ready:
        raise UserError(f"the {preset.name} harness is not installed", file=str(install),
                        field="agent.command",
                        fix=f"run `{target}` once (it installs into {harness_root()})")
    defaults = type(cfg)()
    if cfg.dir != defaults.dir:
        update.pop("dir")
    fields = {"command": preset.command, **update}
    if cfg.memory_mb == defaults.memory_mb:
        fields["memory_mb"] = preset.memory_mb
    return cfg.model_copy(update=fields)
