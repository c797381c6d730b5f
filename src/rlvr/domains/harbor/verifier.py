"""The Harbor verifier: tests/test.sh judges the agent's final state in a fresh lease, and its reward file is
the verdict (`rewards`).

Shared mode: a lease of the agent's image, its working directory made exactly the agent's final one (files the
agent deleted deleted, files it changed written; what it left alone stays the image's own bytes). Separate
mode: a lease of the verifier's own image, with the artifacts the agent's environment exports (the paths under
its working directory that `artifacts` names) placed at the same paths. Either way the lease mounts the task's
tests/ read-only at /tests and gives the run a fresh, writable /logs (a scratch directory of that run alone),
then runs tests/test.sh as Harbor does, from the working directory, with `[verifier] env`, under `[verifier]
timeout_sec`. The agent never saw /tests, and nothing it wrote can be in /logs."""
from __future__ import annotations

import shlex
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlvr.domains.harbor.rewards import LOGS, REWARD_FILES, RewardError, failed, read_rewards, verdict_of
from rlvr.domains.harbor.settings import HarborSettings
from rlvr.errors import UserError
from rlvr.sandbox.base import Sandbox, SandboxPool, environment_of
from rlvr.sandbox.container import RESERVED
from rlvr.sandbox.limits import for_task
from rlvr.sandbox.result import ExecStatus
from rlvr.tasks.settings import settings_of
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext, default_pool
from rlvr.verify.verdict import Verdict

TESTS = "/tests"
OUTPUT_KEPT = 2000
"""Characters of test.sh's output kept in the verdict's details (its tail)."""


def script_argv(path: str, first_line: str) -> list[str]:
    """How to run a Harbor script: by its `#!` line when it has one, else with bash (Harbor runs it
    executable)."""
    if first_line.startswith("#!"):
        return [*shlex.split(first_line[2:].strip()), path]
    return ["bash", path]


def run_script(sb: Sandbox, path: str, first_line: str, env: Mapping[str, str], limits: Any,
               read: tuple[str, ...] = ()) -> Any:
    """Run a task's script in the lease, from the working directory, with `env` (on the image's own), and
    Harbor's /logs directories made."""
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items() if k.isidentifier())
    body = f"mkdir -p {LOGS}/verifier {LOGS}/agent {LOGS}/artifacts 2>/dev/null; {exports}exec " + \
        shlex.join(script_argv(path, first_line))
    return sb.run(["sh", "-c", body], limits=limits, read=read)


def first_line(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.readline(256).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _under(path: str, scope: list[str]) -> bool:
    return any(not s or path == s or path.startswith(s + "/") for s in scope)


def apply_state(sb: Sandbox, files: Mapping[str, str], scope: list[str] | None = None) -> None:
    """Make the lease's working directory (seeded with the image's) hold exactly `files` under `scope` (paths
    relative to it; None: all of it): only the differences are written, so files the agent left alone keep
    their bytes (binary ones included), and files it deleted are deleted."""
    seed = sb.read_files(None)
    changed = {p: text for p, text in files.items() if seed.get(p) != text}
    if changed:
        sb.write_files(changed)
    gone = sorted(p for p in set(seed) - set(files) if _under(p, scope if scope is not None else [""]))
    if gone:
        sb.run(["xargs", "-0", "rm", "-f", "--"], stdin="\0".join(gone))


def artifact_scope(artifacts: tuple[str, ...], workdir: str) -> list[str]:
    """The artifact paths under `workdir`, relative to it ("" for the whole of it). Artifacts elsewhere, where
    rlvr's agent cannot write, are left out, as Harbor leaves out an artifact that does not exist."""
    top = workdir.rstrip("/")
    return [str(Path(a)).removeprefix(top).lstrip("/") for a in artifacts
            if str(Path(a)) == top or str(Path(a)).startswith(top + "/")]


@contextmanager
def verification_lease(pool: SandboxPool, task: Task, s: HarborSettings,
                       final: FinalState) -> Iterator[Sandbox]:
    """A fresh lease holding the agent's final state (module docstring), /tests and a fresh /logs."""
    tests = Path(str(task.source)) / "tests"
    mounts = {TESTS: str(tests)} if tests.is_dir() and any(tests.iterdir()) else {}
    agent = environment_of(task)
    if s.mode == "shared":
        with pool.lease(None, mounts=mounts, scratch=[LOGS], image=agent.get("image"),
                        network=s.network) as sb:  # type: ignore[call-arg]
            apply_state(sb, final.files)
            yield sb
        return
    image = str(_absolute(s.image, task)) if s.image else agent.get("image")
    workdir = _workdir(pool, agent.get("image"))
    scope = artifact_scope(s.artifacts, workdir)
    files = {p: t for p, t in final.files.items() if _under(p, scope)}
    with pool.lease(None, mounts=mounts, scratch=[LOGS], image=image,  # type: ignore[call-arg]
                    network=s.network) as sb:
        if sb.run(["pwd"]).stdout.strip() == workdir:  # Harbor's separate verifier: the artifacts in place
            apply_state(sb, files, scope)
            yield sb
            return
    if files and workdir in RESERVED:
        raise UserError(f"the agent works in {workdir} and its separate verifier elsewhere: rlvr cannot show "
                        "the artifacts there", field="verifier.environment_mode",
                        fix="give both images the same WORKDIR")
    # the verifier works elsewhere: it sees the artifacts read-only where the agent left them
    with pool.lease(None, mounts={**mounts, workdir: files}, scratch=[LOGS], image=image,  # type: ignore[call-arg]
                    network=s.network) as sb:
        yield sb


def _absolute(reference: str, task: Task) -> str:
    from rlvr.sandbox.images import parse

    ref = parse(reference)
    return str(ref.absolute(task.source)) if ref.local else reference


def _workdir(pool: SandboxPool, image: str | None) -> str:
    """The working directory of the agent's environment (where its final state lies)."""
    with pool.lease(None, image=image) as sb:  # type: ignore[call-arg]
        return sb.run(["pwd"]).stdout.strip() or "/workspace"


class HarborVerifier:
    """Judges a Harbor task's final state with its tests/test.sh (module docstring)."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        s = settings_of(task, HarborSettings)
        pool = self.ctx.pool or default_pool()
        test_sh = Path(str(task.source)) / "tests" / "test.sh"
        limits = for_task(pool, task, timeout_s=s.timeout_s)
        t0 = time.perf_counter()
        with verification_lease(pool, task, s, final) as sb:
            res = run_script(sb, f"{TESTS}/test.sh", first_line(test_sh), s.env, limits, REWARD_FILES)
        timings = {"sandbox": time.perf_counter() - t0}
        output = (res.stdout + ("\n[stderr]\n" + res.stderr if res.stderr.strip() else ""))[-OUTPUT_KEPT:]
        if res.status is ExecStatus.infra_error:
            return Verdict.infra(f"tests/test.sh could not run: {res.error or 'sandbox infra error'}",
                                 timings=timings)
        if res.status is ExecStatus.timeout:
            return failed(f"tests/test.sh ran past [verifier] timeout_sec ({s.timeout_s:g} s)", output=output)
        try:
            file, rewards = read_rewards(res.files)
        except RewardError as exc:
            return failed(f"{exc} (test.sh {res.status.value}, exit code {res.exit_code})", output=output)
        verdict = verdict_of(rewards, file)
        return verdict.model_copy(update={"timings": timings, "details": {"output": output,
                                                                          "exit_code": res.exit_code}})
