"""Reading one Harbor task directory (Harbor 0.25.0, task schema 1.4) into an rlvr Task.

    task.toml        read with Harbor's own models (`upstream`), unknown keys and unsupported features refused
    instruction.md   the prompt (leading canary lines stripped, as Harbor does)
    environment/     the agent's image: its Dockerfile (`dockerfile:environment`), else `docker_image`
    tests/           mounted read-only at /tests only when verifying (test.sh writes /logs/verifier/reward.*)
    solution/        solve.sh, the gold: played in the agent's environment by `rlvr tasks validate`

Everything the verifier needs is derived here once and kept in the task's `[verifier]` table
(`HarborSettings`), so a Task record alone says how it is judged; the tests and the solution stay on disk in
the task directory (`Task.source`), read at verification time with their bytes and modes. docs/HARBOR.md maps
every field."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tomllib
from pydantic import ValidationError

from rlvr.domains.harbor.settings import DOMAIN_NAME, HarborSettings
from rlvr.errors import UserError
from rlvr.sandbox.images import parse as parse_image
from rlvr.tasks.problems import unknown_key, validation_error
from rlvr.tasks.settings import checked
from rlvr.tasks.spec import Task, TaskLimits

SCHEMAS = ("1.0", "1.1", "1.2", "1.3", "1.4")
"""The task.toml schema versions rlvr reads: those Harbor 0.25.0's models read (1.4 is its own)."""
ALIASES = {"TaskConfig": ("version",), "EnvironmentConfig": ("memory", "storage")}
"""Older keys Harbor's own validators still read (renamed to schema_version, memory_mb and storage_mb)."""
MAX_TURNS = 30
"""Model turns of an episode: Harbor bounds an agent by time alone (`[agent] timeout_sec`)."""
MAX_TOKENS = 16384
"""Tokens the model may generate over an episode."""
COMMAND_TIMEOUT_S = 120.0
"""Seconds one tool command may run (within the episode's `[agent] timeout_sec`)."""
DEFAULT_AGENT_TIMEOUT_S = 900.0
"""The episode's wall-clock budget when `[agent] timeout_sec` is unset."""
DIFFICULTY = {"easy": 0.25, "medium": 0.5, "hard": 0.75}
"""`[metadata] difficulty` as rlvr's prior difficulty."""
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_TEMPLATE = re.compile(r"\$\{")


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


def read_config(path: Path) -> Any:
    """The task's `TaskConfig` (Harbor's model), after the checks Harbor's models leave out: the schema
    version, and no key they do not declare."""
    from rlvr.domains.harbor.upstream.harbor.models.task.config import TaskConfig

    file = path / "task.toml"
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"TOML syntax error: {exc}", file=file, fix="fix the syntax") from None
    version = data.get("schema_version", data.get("version", "1.4"))
    if version not in SCHEMAS:
        raise UserError(f"schema version {version!r} is not one rlvr reads", file=file,
                        field="schema_version",
                        fix=f'write one of {", ".join(SCHEMAS)} (Harbor 0.25.0 writes "1.4")')
    unknown = unknown_key(data, TaskConfig, ALIASES)
    if unknown is not None:
        where, close = unknown
        raise UserError("unknown field", file=file, field=where,
                        fix=f"did you mean {', '.join(map(repr, close))}?" if close
                        else "remove it (Harbor 0.25.0's task schema has no such field)")
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, file, model=TaskConfig) from None


def strip_canary(text: str) -> str:
    """The instruction without its leading canary lines and the blank lines after them (Harbor's rule)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def _refuse(file: Path, field: str, what: str, fix: str) -> UserError:
    return UserError(f"{what}: rlvr does not run it", file=file, field=field, fix=fix)


def _check_supported(cfg: Any, path: Path) -> None:
    """Refuse, one line each, what rlvr cannot honour (never run a task with part of it dropped)."""
    file, env, ver = path / "task.toml", cfg.environment, cfg.verifier
    checks = [
        (cfg.steps, "steps", "a multi-step task", "split it into single-step tasks"),
        (cfg.multi_step_reward_strategy, "multi_step_reward_strategy", "a multi-step reward",
         "remove it with [[steps]]"),
        (env.os.value != "linux", "environment.os", "a Windows environment", "use a Linux image"),
        (env.gpus or env.gpu_types or env.tpu, "environment.gpus", "an accelerator",
         "remove gpus, gpu_types and tpu"),
        (env.mcp_servers, "environment.mcp_servers", "an MCP server", "remove [[environment.mcp_servers]]"),
        (env.healthcheck, "environment.healthcheck", "a healthcheck", "remove [environment.healthcheck]"),
        (env.skills_dir, "environment.skills_dir", "an agent skills directory", "remove skills_dir"),
        (env.workdir, "environment.workdir", "a working directory other than the image's",
         "set WORKDIR in environment/Dockerfile instead"),
        (env.env, "environment.env", "environment variables set from outside the image",
         "set them with ENV in environment/Dockerfile (rlvr keeps the image's ENV)"),
        (cfg.agent.user is not None, "agent.user", "a chosen user",
         "remove it: the agent runs as the image's USER (root becomes an unprivileged user)"),
        (ver.user is not None, "verifier.user", "a chosen user",
         "remove it: tests/test.sh runs as the image's USER (root becomes an unprivileged user)"),
        (ver.collect, "verifier.collect", "a collect hook in a compose service",
         "remove [[verifier.collect]]"),
        ((path / "environment" / "docker-compose.yaml").exists(), "environment/docker-compose.yaml",
         "a multi-container environment", "build one image from environment/Dockerfile"),
    ]
    for bad, field, what, fix in checks:
        if bad:
            raise _refuse(file, field, what, fix)
    for field, policy in (("environment", env), ("agent", cfg.agent), ("verifier", ver),
                          ("verifier.environment", ver.environment)):
        mode = policy.network_mode if policy is not None else None
        if mode is not None and mode.value == "allowlist":
            raise _refuse(file, f"{field}.network_mode", "a network allowlist",
                          fix='use "no-network", or "public" with [sandbox] allow_network = true')
    for field, table in (("verifier.env", ver.env), ("solution.env", cfg.solution.env)):
        for key, value in table.items():
            if _TEMPLATE.search(value):
                raise UserError("a ${VAR} template would read the host's environment, which never enters the "
                                "sandbox", file=file, field=f"{field}.{key}", fix="write the value itself")


def _network(cfg: Any, phase: Any) -> bool:
    """Whether a phase asks for the network: its own override, else the environment's `network_mode` when the
    task sets it. Harbor's default is public; rlvr's is none, so a task that needs the network says so."""
    mode = phase.network_mode if phase.network_mode is not None else (
        cfg.environment.network_mode if "network_mode" in cfg.environment.model_fields_set else None)
    return mode is not None and mode.value == "public"


def _dockerfile_image(directory: Path, rel: str) -> str | None:
    return f"dockerfile:{rel}" if any((directory / n).is_file() for n in ("Dockerfile", "Containerfile")) \
        else None


def _image(file: Path, field: str, reference: str | None) -> str:
    """A `docker_image`, a registry reference, as an rlvr image reference (anything else is one line naming
    the field)."""
    fix = "name a registry image (debian:bookworm-slim), or build one from a Dockerfile in the task"
    try:
        ref = parse_image(reference or "")
    except UserError as exc:
        raise UserError(exc.what, file=file, field=field, fix=fix) from None
    if ref.transport != "docker":
        raise UserError(f"{reference!r} is not a registry image", file=file, field=field, fix=fix)
    return str(ref)


def _images(cfg: Any, path: Path) -> tuple[str, str | None]:
    """(the agent's image, the separate verifier's image or None for shared mode), as references relative to
    the task directory. Harbor's precedence: `[verifier.environment] docker_image`, else tests/Dockerfile,
    else a fresh copy of the agent's environment."""
    file = path / "task.toml"
    agent = _dockerfile_image(path / "environment", "environment")
    if agent is None:
        if not cfg.environment.docker_image:
            raise UserError("no environment: neither environment/Dockerfile nor [environment] docker_image",
                            file=path, field="environment", fix="add environment/Dockerfile")
        agent = _image(file, "environment.docker_image", cfg.environment.docker_image)
    mode = cfg.verifier.environment_mode.value if cfg.verifier.environment_mode is not None else (
        "separate" if cfg.verifier.environment is not None else "shared")
    if mode == "shared":
        return agent, None
    own = cfg.verifier.environment
    if own is not None and own.docker_image:
        return agent, _image(file, "verifier.environment.docker_image", own.docker_image)
    return agent, _dockerfile_image(path / "tests", "tests") or agent


def _artifacts(cfg: Any) -> tuple[str, ...]:
    """The paths the separate verifier receives from the agent's environment."""
    out = []
    for entry in cfg.artifacts:
        source = entry if isinstance(entry, str) else entry.source
        if not isinstance(entry, str) and (entry.service not in (None, "main") or entry.exclude):
            raise UserError("an artifact from a compose service, or with exclusions", field="artifacts",
                            fix="name paths of the agent's environment only")
        out.append(source)
    return tuple(out)


def load_task(path: str | Path) -> Task:
    """One Harbor task directory as an rlvr Task (every refusal one UserError naming the file and field)."""
    path = Path(path).resolve()
    if not is_task_dir(path):
        raise UserError("not a Harbor task: no task.toml", file=path, fix="give a Harbor task directory")
    cfg = read_config(path)
    _check_supported(cfg, path)
    instruction = path / "instruction.md"
    if not instruction.is_file():
        raise UserError("missing instruction.md", file=path, fix="add instruction.md, the task's prompt")
    bundled = cfg.verifier.environment is not None and cfg.verifier.environment.docker_image
    if not (path / "tests" / "test.sh").is_file() and not bundled:
        raise UserError("missing tests/test.sh", file=path, fix="add tests/test.sh, which writes "
                        "/logs/verifier/reward.txt")
    agent, verifier_image = _images(cfg, path)
    settings = HarborSettings(
        kind=DOMAIN_NAME, mode="shared" if verifier_image is None else "separate", image=verifier_image,
        network=_network(cfg, cfg.verifier), timeout_s=cfg.verifier.timeout_sec, env=dict(cfg.verifier.env),
        solution_env=dict(cfg.solution.env), artifacts=_artifacts(cfg))
    wall = cfg.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S
    meta = cfg.metadata
    package = cfg.task.model_dump(mode="json") if cfg.task is not None else None
    prompt = strip_canary(instruction.read_text(encoding="utf-8"))
    task = Task(id=path.name, domain=DOMAIN_NAME, prompt=prompt,
                verifier=settings.model_dump(mode="json", exclude_defaults=True), image=agent,
                network=_network(cfg, cfg.agent),
                limits=TaskLimits(max_turns=MAX_TURNS, max_tokens=MAX_TOKENS, wall_s=wall,
                                  exec_timeout_s=min(COMMAND_TIMEOUT_S, wall),
                                  memory_mb=cfg.environment.memory_mb),
                difficulty=DIFFICULTY.get(str(meta.get("difficulty", "")).lower()),
                metadata={"harbor": {"schema_version": cfg.schema_version, "task": package, "metadata": meta,
                                     "source": cfg.source, "cpus": cfg.environment.cpus,
                                     "storage_mb": cfg.environment.storage_mb}},
                source=str(path))
    return checked(task, file=path / "task.toml")
