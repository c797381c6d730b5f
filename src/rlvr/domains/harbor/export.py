"""rlvr tasks out as Harbor tasks: `rlvr tasks export --format harbor -o DIR SPEC`.

Each task becomes a Harbor task (schema 1.4) whose tests run rlvr's own verifier, driven by the task alone
(its verifier, its image, its requirements and its domain's), never by a rule for one domain:

    task.toml          Harbor's own model writes it (`upstream`): timeouts, network, memory, `[verifier]
                       environment_mode = "separate"` and `artifacts = [WORKDIR]`, the rlvr key in metadata
    instruction.md     the prompt, and where to work (WORKDIR) or, single-turn, where the answer goes
    environment/       the agent's image: the task's own image (its Dockerfile and build context, or its
                       registry name) or Debian bookworm with Python and the packages the task's programs
                       need; the task's initial files in WORKDIR
    tests/             the verifier's image: the same base with Python, rlvr and what its verifier needs (one
                       zip of this installation's files, `site`), the Task record with its hidden material
                       (task.json), and test.sh, which runs `rlvr.domains.harbor.judge` on the agent's final
                       WORKDIR and writes /logs/verifier/reward.json
    solution/solve.sh  writes the gold final state (files, or the answer)

A tree task (`rlvr.sandbox.tree`: modes, links and a git history are part of its state) is unpacked in the
environment's WORKDIR when its image is built, and its judge packs the final WORKDIR again as rlvr does.

The verifier has its own image (Harbor's separate mode), so the agent never sees rlvr's hidden material nor
can change the program that judges it; the agent's WORKDIR reaches it as an artifact. Everything is written
under a temporary directory renamed into place when all tasks are written (`rlvr.atomic.atomic_dir`); a task
that cannot be exported is one UserError before anything is written."""
from __future__ import annotations

import base64
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.atomic import atomic_dir
from rlvr.domains.harbor.judge import ANSWER_FILE
from rlvr.domains.harbor.settings import DOMAIN_NAME
from rlvr.domains.harbor.site import requirements_site, site_zip
from rlvr.errors import UserError
from rlvr.sandbox.images import ImageRef, parse
from rlvr.sandbox.tree import RESTORE, TREE, UNPACK, has_tree
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.proof import source_of

BASE = "debian:bookworm-slim"
"""The base of a task without an image of its own (Python 3.11, as rlvr's; `make images` builds it here)."""
WORKDIR = "/app"
"""The working directory of a task without an image of its own."""
VERIFIER_TIMEOUT_S = 600.0
"""`[verifier] timeout_sec` of an exported task: rlvr's whole verification, every command of it included."""
PYTHON_DIR = "/opt/rlvr-python"
"""Where the exported images keep their venv (not /opt/rlvr: rlvr's jail mounts its own files there)."""
VENV = f"{PYTHON_DIR}/venv"
RLVR_DIR = ".rlvr"
"""The exporter's own files inside a build context (beside a task image's own context)."""
APT_PYTHON = ("RUN apt-get update --error-on=any && apt-get install -y --no-install-recommends python3 "
              "&& rm -rf /var/lib/apt/lists/*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Base:
    """What the Dockerfiles of one task start from."""

    lines: tuple[str, ...]
    """The base's Dockerfile lines (the task image's own Dockerfile, or FROM)."""
    context: Path | None
    """The task image's build context, copied into each build context (None: nothing to copy)."""
    workdir: str
    """The working directory the agent works in and the verifier judges."""
    user: str
    """The image's USER (empty: root)."""
    python: bool
    """Whether the agent's environment gets Python and the task's packages (a task without an image: rlvr's
    sandbox gives its programs a Python)."""


def task_dir_name(task: Task) -> str:
    return _UNSAFE.sub("-", f"{task.domain}-{task.id}").strip(".-") or "task"


def _base(task: Task) -> Base:
    """The task's image as a Dockerfile base (an image archive cannot be one: refused)."""
    if task.image is None:
        return Base((f"FROM {BASE}",), None, WORKDIR, "", True)
    from rlvr.sandbox import imagecache

    ref: ImageRef = parse(task.image).absolute(task.source if task.source and Path(task.source).is_dir()
                                               else None)
    if ref.transport not in ("dockerfile", "docker", "containers-storage"):
        raise UserError(f"task {task.key}: its image {task.image} is an archive, which a Dockerfile "
                        "cannot start FROM", field="image",
                        fix="give the task a Dockerfile (dockerfile:DIR) or a registry image to export it")
    root = imagecache.resolve(ref)  # its WORKDIR and USER (a build, once, where it is not cached yet)
    if ref.transport != "dockerfile":
        return Base((f"FROM {ref.target}",), None, root.workdir, root.user, False)
    context = Path(ref.target)
    name = ref.dockerfile or next(n for n in ("Dockerfile", "Containerfile") if (context / n).is_file())
    lines = tuple((context / name).read_text(encoding="utf-8").splitlines())
    return Base(lines, context, root.workdir, root.user, False)


def _venv(check: str) -> str:
    purelib = f"$({VENV}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
    return (f"RUN python3 -m venv --without-pip {VENV} && python3 -m zipfile -e {PYTHON_DIR}/site.zip "
            f"\"{purelib}\" && rm {PYTHON_DIR}/site.zip && {VENV}/bin/python -c {shlex.quote(check)}")


def _python_lines(base: Base, check: str) -> list[str]:
    """Python 3.11 in a venv holding the zip's packages, as root; the image's USER again after."""
    lines = ["USER root"] if base.user else []
    lines += [APT_PYTHON if base.python else
              f"RUN command -v python3 >/dev/null || ({APT_PYTHON.removeprefix('RUN ')})",
              f"COPY {RLVR_DIR}/site.zip {PYTHON_DIR}/site.zip", _venv(check), f"ENV PATH={VENV}/bin:$PATH"]
    return lines + ([f"USER {base.user}"] if base.user else [])


def environment_dockerfile(task: Task, base: Base) -> str:
    head = [f"# The agent's environment of rlvr task {task.key} (rlvr tasks export --format harbor)",
            *base.lines]
    own = _python_lines(base, "import sys") if base.python else []
    chown = f"--chown={base.user} " if base.user else ""
    files = [f"COPY {chown}{RLVR_DIR}/workspace/ {base.workdir}/"] if task.workspace else []
    if has_tree(task.workspace):  # the agent sees the tree, never its archive (as in rlvr's own lease)
        files.append(f"RUN {RESTORE}")
    return "\n".join([*head, *own, f"WORKDIR {base.workdir}", *files]) + "\n"


def tests_dockerfile(task: Task, base: Base) -> str:
    head = [f"# The verifier's environment of rlvr task {task.key}: the agent's base with rlvr's verifier",
            *base.lines]
    return "\n".join([*head, *_python_lines(base, "import pydantic_core, rlvr.verify.base"),
                      f"WORKDIR {base.workdir}", "COPY task.json test.sh /tests/"]) + "\n"


def test_sh(task: Task, base: Base) -> str:
    return (f"#!/bin/bash\n# rlvr's verifier judges the agent's final {base.workdir} (rlvr task {task.key}); "
            "it writes /logs/verifier/reward.json.\n"
            f"exec {VENV}/bin/python -m rlvr.domains.harbor.judge /tests/task.json "
            f"{shlex.quote(base.workdir)} /logs/verifier\n")


def solve_sh(task: Task, gold: FinalState, base: Base) -> str:
    """A script that leaves the gold final state: every gold file written (base64, any text), the initial
    files it does not keep removed, the answer in answer.txt. A tree's gold replaces the whole WORKDIR with
    its archive's tree and keeps the archive beside it, so that a state carried as text files (rlvr's Harbor
    domain carries one so) keeps its modes and history: the judge unpacks it again."""
    out = ["#!/bin/bash", f"# The gold final state of rlvr task {task.key}.", "set -e",
           f"cd {shlex.quote(base.workdir)}"]
    files = dict(gold.files)
    if has_tree(files):
        out.append("find . -mindepth 1 -delete")
        files = {TREE: files[TREE]}
    if gold.answer is not None and not task.multi_turn:
        files[ANSWER_FILE] = gold.answer
    for rel in sorted(set(task.workspace) - set(files)):
        out.append(f"rm -f -- {shlex.quote(rel)}")
    for rel, text in sorted(files.items()):
        if "/" in rel:
            out.append(f"mkdir -p {shlex.quote(rel.rsplit('/', 1)[0])}")
        data = base64.encodebytes(text.encode("utf-8")).decode()
        out.append(f"base64 -d > {shlex.quote(rel)} <<'RLVR_EOF'\n{data}RLVR_EOF")
    if has_tree(files):
        out.append(UNPACK)
    return "\n".join(out) + "\n"


def instruction(task: Task, base: Base) -> str:
    where = (f"Write your final answer to `{base.workdir}/{ANSWER_FILE}`." if not task.multi_turn else
             f"Work in `{base.workdir}`, which holds the task's files: what you leave there is judged.")
    return f"{task.prompt.rstrip()}\n\n---\n{where}\n"


def task_toml(task: Task, base: Base, name: str) -> str:
    """task.toml, written by Harbor's own model."""
    from rlvr.domains.harbor.upstream.harbor.models.task.config import TaskConfig

    network = "public" if task.network else "no-network"
    first = next((ln.strip() for ln in task.prompt.splitlines() if ln.strip()), task.key)
    meta: dict[str, Any] = {"domain": task.domain, "id": task.id, "key": task.key}
    meta.update({k: v for k, v in (("tier", task.tier), ("difficulty", task.difficulty), ("seed", task.seed),
                                    ("index", task.index)) if v is not None})
    cfg = TaskConfig.model_validate({
        "schema_version": "1.4", "task": {"name": f"rlvr/{name}", "description": first[:200]},
        "metadata": {"rlvr": meta},
        "verifier": {"timeout_sec": VERIFIER_TIMEOUT_S, "environment_mode": "separate",
                     "network_mode": network},
        "agent": {"timeout_sec": task.limits.wall_s},
        "environment": {"network_mode": network, **({"memory_mb": task.limits.memory_mb}
                                                      if task.limits.memory_mb else {})},
        "artifacts": [base.workdir]})
    return cfg.model_dump_toml()


@dataclass(frozen=True)
class Plan:
    """One task's export, checked before anything is written."""

    task: Task
    name: str
    base: Base
    gold: FinalState | None
    requirements: tuple[str, ...]
    paths: tuple[str, ...]
    """Where the task's own requirements are installed, when not in this environment."""


def needed(task: Task) -> tuple[str, ...]:
    """The distributions of the modules the task's judging imports in the sandbox: the `needs` of its domain
    and of the domain that defines its verifier kind (the repo domains judge with `code`'s pytest)."""
    import importlib.metadata as md

    from rlvr.tasks.settings import kind_of

    kind = kind_of(task)
    modules = {m for name in registry.names() if name == task.domain or kind in registry.entry(name).verifiers
               for m in registry.entry(name).needs}
    owners = md.packages_distributions()
    missing = sorted(m for m in modules if m not in owners)
    if missing:
        raise UserError(f"task {task.key} needs {', '.join(missing)} to be judged, which is not installed "
                        "here", field="domain", fix=f"pip install {' '.join(missing)} where you export")
    return tuple(sorted({owners[m][0] for m in modules}))


def plan(task: Task) -> Plan:
    if task.domain == DOMAIN_NAME:
        raise UserError(f"task {task.key} is a Harbor task already", field="tasks",
                        fix=f"copy its directory ({task.source})")
    if not registry.is_registered(task.domain):
        raise UserError(f"task {task.key}: domain {task.domain!r} is not registered, so no verifier of its "
                        "can judge it inside the export", field="domain",
                        fix="install the package of its domain")
    dist = registry.provider(task.domain)  # the exported verifier loads the domain from its package
    if dist is None:
        raise UserError(f"task {task.key}: domain {task.domain!r} is registered in code, not by an installed "
                        "package, so the exported verifier cannot load it", field="domain",
                        fix="declare it under the rlvr.domains entry points of a package (docs/DOMAINS.md)")
    plugin = () if dist == "rlvr" else (dist,)  # a third-party domain travels with its own package
    domain = registry.entry(task.domain)
    requirements = (*plugin, *needed(task), *domain.requirements, *task.requirements)
    return Plan(task, task_dir_name(task), _base(task), source_of(task).gold(task), tuple(requirements),
                requirements_site(task.requirements))


def write_task(directory: Path, p: Plan) -> None:
    """One Harbor task directory."""
    task, base = p.task, p.base
    record = task.model_copy(update={"image": None, "network": False, "requirements": (), "source": None})
    env, tests = directory / "environment", directory / "tests"
    for ctx in (env, tests):
        if base.context is not None:
            shutil.copytree(base.context, ctx, symlinks=True)
        (ctx / RLVR_DIR).mkdir(parents=True)
    for rel, text in task.workspace.items():
        path = env / RLVR_DIR / "workspace" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if base.python:
        (env / RLVR_DIR / "site.zip").write_bytes(site_zip(p.requirements, rlvr=False, paths=p.paths))
    (tests / RLVR_DIR / "site.zip").write_bytes(site_zip(p.requirements, rlvr=True, paths=p.paths))
    (env / "Dockerfile").write_text(environment_dockerfile(task, base), encoding="utf-8")
    (tests / "Dockerfile").write_text(tests_dockerfile(task, base), encoding="utf-8")
    (tests / "task.json").write_text(record.model_dump_json(indent=1), encoding="utf-8")
    (tests / "test.sh").write_text(test_sh(task, base), encoding="utf-8")
    (directory / "instruction.md").write_text(instruction(task, base), encoding="utf-8")
    (directory / "task.toml").write_text(task_toml(task, base, p.name), encoding="utf-8")
    if p.gold is not None:
        (directory / "solution").mkdir()
        (directory / "solution" / "solve.sh").write_text(solve_sh(task, p.gold, base), encoding="utf-8")
    for script in (tests / "test.sh", directory / "solution" / "solve.sh"):
        if script.exists():
            script.chmod(0o755)


def export(tasks: list[Task], out: str | Path) -> list[str]:
    """Write `tasks` as Harbor tasks under the new directory `out`; returns their directory names. Each is
    read back with Harbor's models (`format.read_config`) before the directory appears."""
    from rlvr.domains.harbor.format import load_task

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError("already exists", file=out, fix="give a new directory to export into")
    if not tasks:
        raise UserError("the tasks SPEC names no tasks", field="tasks", fix="name some tasks")
    plans = [plan(t) for t in tasks]
    seen: dict[str, str] = {}
    for p in plans:
        if p.name in seen:
            raise UserError(f"tasks {seen[p.name]} and {p.task.key} would share the directory {p.name}",
                            field="tasks", fix="export them apart")
        seen[p.name] = p.task.key
    with atomic_dir(out) as tmp:
        for p in plans:
            write_task(tmp / p.name, p)
            load_task(tmp / p.name)  # what Harbor's models and rlvr's reader make of it
    return [p.name for p in plans]
