"""The tools a model uses in a task's sandbox: a table of named functions with JSON-schema parameters."""
from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.patch import PatchError, apply_patch, parse_patch
from rlvr.errors import InfraError
from rlvr.sandbox.base import Sandbox, iter_safe_paths
from rlvr.sandbox.limits import Layer, resolve
from rlvr.sandbox.result import ExecLimits, ExecResult
from rlvr.tasks.spec import Task


@dataclass
class ToolContext:
    """What a tool may touch: the leased sandbox, the task, per-command limits and the output cap."""

    sandbox: Sandbox
    task: Task
    limits: ExecLimits
    """What the task's commands run under: the pool's `[sandbox]` defaults and the task's own limits, resolved
    (`rlvr.sandbox.limits.for_task`); a tool's own request can only tighten them (`_exec`)."""
    max_output_chars: int = 4000


@dataclass
class ToolOutput:
    """What a tool returns to the model."""

    content: str
    exec_status: str | None = None
    """ExecResult status when the tool ran a command."""
    submitted: bool = False
    """True for submit: the episode terminates."""
    answer: str | None = None
    """The answer given with submit, if any."""
    refused: list[str] = field(default_factory=list)
    """Symbolic links out of the workspace the command made, removed (`refuse_links_out`)."""


@dataclass(frozen=True)
class Tool:
    """One tool: its name, what it does, JSON-schema parameters and the function that runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[[ToolContext, dict[str, Any]], ToolOutput]
    mutates: bool = True
    """False for read-only tools (not replayed when a sandbox is rebuilt after an infra fault)."""
    required: tuple[str, ...] = field(default=())

    def spec(self) -> dict[str, Any]:
        """The OpenAI `tools` entry."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


class ToolArgError(ValueError):
    """A tool call's arguments are missing or of the wrong type."""


def cap(text: str, limit: int) -> str:
    """Keep the head and the tail of long output (errors are usually at the end)."""
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def import_roots(task: Task) -> list[str]:
    """The workspace directories the task's code is imported from besides the root (the code verifier's
    `import_roots`, e.g. `src` for a src layout)."""
    from rlvr.errors import UserError
    from rlvr.tasks.settings import known_settings  # typed `[verifier]`, checked when the task loaded

    try:
        settings = known_settings(task)
    except UserError:  # a task made in code and never loaded: its table is reported where it is judged
        return []
    return [str(r).strip("/") for r in getattr(settings, "import_roots", None) or []]


def with_import_roots(argv: list[str], roots: list[str]) -> list[str]:
    """`argv` run with the workspace's import roots first on PYTHONPATH (resolved against the directory the
    command starts in, the workspace, so a later `cd` keeps them)."""
    if not roots:
        return argv
    path = ":".join(f"$PWD/{shlex.quote(r)}" for r in roots)
    return ["sh", "-c", f'PYTHONPATH="{path}${{PYTHONPATH:+:$PYTHONPATH}}" exec "$@"', "sh", *argv]


def _exec(ctx: ToolContext, argv: list[str], request: Layer = None) -> ExecResult:
    """Run one command of a tool under the context's limits, tightened by the tool's own `request` (the last
    layer of `rlvr.sandbox.limits.resolve`), with the task's import roots on PYTHONPATH; an infra fault raises
    InfraError."""
    argv = with_import_roots(argv, import_roots(ctx.task))
    res = ctx.sandbox.run(argv,
                          limits=ctx.limits if request is None else resolve(ctx.limits, request=request))
    if res.infra_error:
        raise InfraError(res.error or "sandbox infra error")
    return res


def _report(res: ExecResult, limit: int) -> str:
    head = f"[{res.status.value}" + (f", exit code {res.exit_code}" if res.exit_code is not None else "") + (
        f", signal {res.signal}" if res.signal else "") + "]"
    body = res.stdout + (("\n[stderr]\n" + res.stderr) if res.stderr.strip() else "")
    return head + "\n" + cap(body, limit)


def _str_arg(args: dict[str, Any], key: str, default: str | None = None) -> str:
    val = args.get(key, default)
    if val is None:
        raise ToolArgError(f"missing argument {key!r}")
    if not isinstance(val, str):
        raise ToolArgError(f"argument {key!r} must be a string, got {type(val).__name__}")
    return val


def _safe_path(path: str) -> str:
    path = path.strip()
    path = path.removeprefix("./")
    try:
        return next(iter_safe_paths({path: ""}))[0]
    except ValueError:
        raise ToolArgError(f"path {path!r} must be relative to the workspace, without '..'") from None


def list_files(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    pattern = _str_arg(args, "pattern", "*")
    # `find` in the sandbox rather than reading the workspace back: a listing never costs the files' size
    res = _exec(ctx, ["find", ".", "-type", "f", "-not", "-path", "*/__pycache__/*", "-not", "-path",
                      "./.git/*"])
    found = (line[2:] for line in res.stdout.splitlines() if line.startswith("./"))
    names = sorted(p for p in found if fnmatch.fnmatch(p, pattern))
    return ToolOutput(cap("\n".join(names) or "(no files)", ctx.max_output_chars))


def read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    path = _safe_path(_str_arg(args, "path"))
    got = ctx.sandbox.read_files([path])
    if path not in got:
        return ToolOutput(f"error: {path} does not exist (see list_files)")
    return ToolOutput(cap(got[path], ctx.max_output_chars))


def write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    path = _safe_path(_str_arg(args, "path"))
    content = _str_arg(args, "content")
    ctx.sandbox.write_files({path: content})
    return ToolOutput(f"wrote {path} ({len(content)} characters)")


def patch_tool(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    text = _str_arg(args, "patch")
    try:
        touched = sorted({_safe_path(p) for fp in parse_patch(text) for p in (fp.old, fp.new)
                          if p is not None})
        changes = apply_patch(ctx.sandbox.read_files(touched), text)  # only the files the patch names
    except (PatchError, ToolArgError) as exc:
        return ToolOutput(f"error: patch not applied: {exc}")
    writes = {p: c for p, c in changes.items() if c is not None}
    if writes:
        ctx.sandbox.write_files(writes)
    deleted = [p for p, c in changes.items() if c is None]
    if deleted:
        _exec(ctx, ["rm", "-f", "--", *deleted])
    summary = ", ".join(f"{'deleted' if c is None else 'patched'} {p}" for p, c in changes.items())
    return ToolOutput(f"applied: {summary}")


def run(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    command = _str_arg(args, "command")
    res = _exec(ctx, ["sh", "-c", command])
    return _links_refused(ctx, ToolOutput(_report(res, ctx.max_output_chars), exec_status=res.status.value))


BASH_TRUNCATED = "[output truncated: the command wrote more than the sandbox keeps ({stream})]"


def bash(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    """One bash command in the workspace, with the sandbox interpreter's environment (the project's venv for a
    built repo task) first on PATH, under the context's limits; output capped, both cuts marked. A symbolic
    link out of the workspace that the command left is removed and the model told (`refuse_links_out`)."""
    command = _str_arg(args, "command")
    res = _exec(ctx, ["bash", "-c", command])
    text = _report(res, ctx.max_output_chars)
    cut = [s for s, t in (("stdout", res.stdout_truncated), ("stderr", res.stderr_truncated)) if t]
    if cut:
        text += "\n" + BASH_TRUNCATED.format(stream=", ".join(cut))
    return _links_refused(ctx, ToolOutput(text, exec_status=res.status.value))


def _links_refused(ctx: ToolContext, out: ToolOutput) -> ToolOutput:
    """A shell command's output, with the links out of the workspace it left removed and named."""
    refused = refuse_links_out(ctx.sandbox, ctx.limits)
    out.content += "".join("\n" + LINK_REFUSED.format(path=p, target=t) for p, t in refused)
    out.refused = [p for p, _ in refused]
    return out


LINK_SWEEP = ('find . -type l -print0 2>/dev/null | while IFS= read -r -d "" l; do t=$(readlink -f -- "$l"); '
              'case "$t" in "$PWD"|"$PWD"/*) ;; *) printf "%s\\t%s\\n" "${l#./}" "$(readlink -- "$l")"; '
              'rm -f -- "$l";; esac; done')
"""Removes every symbolic link of the workspace that resolves out of it, printing `path<TAB>target` for each:
run where the links are (the sandbox), so it resolves them as the jobs see them."""
LINK_REFUSED = ("[refused: {path} was a symbolic link to {target}, outside the workspace; it was removed. "
                "A link out of the workspace is not part of your work and is flagged; copy what you need "
                "instead]")


def refuse_links_out(sandbox: Sandbox, limits: ExecLimits | None = None) -> list[tuple[str, str]]:
    """Remove the workspace's symbolic links that lead out of it: [(path, target)] of those removed. A link
    that stays inside is the work's own (readers read what it leads to: `rlvr.links`)."""
    res = sandbox.run(["bash", "-c", LINK_SWEEP], limits=limits)
    if res.infra_error:
        raise InfraError(res.error or "sandbox infra error")
    out = []
    for line in res.stdout.splitlines():
        path, tab, target = line.partition("\t")
        if tab and path:
            out.append((path, target))
    return out


def visible_tests(task: Task) -> list[str]:
    """The workspace's own tests: the code verifier's `visible_tests` or every test_*.py / *_test.py file."""
    from rlvr.tasks.settings import known_settings  # typed `[verifier]`, checked when the task loaded

    settings = known_settings(task)
    declared = settings.workspace_tests() if settings is not None else None
    if declared:
        return [str(p) for p in declared]
    return sorted(p for p in task.workspace if fnmatch.fnmatch(p.rsplit("/", 1)[-1], "test_*.py")
                  or fnmatch.fnmatch(p.rsplit("/", 1)[-1], "*_test.py"))


def test_command(task: Task) -> list[str] | None:
    """The task's own test command (its settings' `test_command`), when its visible tests are not pytest's."""
    from rlvr.tasks.settings import known_settings  # typed `[verifier]`, checked when the task loaded

    settings = known_settings(task)
    return settings.test_command() if settings is not None else None


def has_tests(task: Task) -> bool:
    """Whether `run_tests` has anything to run for `task`."""
    return test_command(task) is not None or bool(visible_tests(task))


def run_tests(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    own = test_command(ctx.task)
    if own is not None:
        res = _exec(ctx, own)
        return ToolOutput(f"$ {shlex.join(own)}\n" + _report(res, ctx.max_output_chars),
                          exec_status=res.status.value)
    tests = visible_tests(ctx.task)
    if not tests:
        return ToolOutput("no visible tests in this workspace")
    argv = ["python", "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider", "--no-header", "-rN",
            *tests]
    res = _exec(ctx, argv)
    out = res.stdout
    # the compact report: failures section and summary line, not the collection chatter
    if "= FAILURES =" in out:
        out = out[out.index("= FAILURES ="):]
    text = f"$ {shlex.join(argv)}\n" + _report(res.model_copy(update={"stdout": out}),
                                                   ctx.max_output_chars)
    return ToolOutput(text, exec_status=res.status.value)


def submit(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    answer = args.get("answer")
    return ToolOutput("submitted", submitted=True, answer=None if answer is None else str(answer))


def _params(**props: str) -> dict[str, Any]:
    return {"type": "object",
            "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
            "required": [k for k in props if k not in ("pattern", "answer")]}


TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("list_files", "List workspace files (optional glob pattern).", _params(pattern="glob, default *"),
         list_files, mutates=False),
    Tool("read_file", "Read a workspace file.", _params(path="relative path"), read_file, mutates=False),
    Tool("write_file", "Create or overwrite a workspace file.",
         _params(path="relative path", content="file text"),
         write_file),
    Tool("apply_patch", "Apply a unified diff (--- a/F, +++ b/F, @@ hunks).", _params(patch="unified diff"),
         patch_tool),
    Tool("run", "Run a shell command in the workspace.", _params(command="shell command"), run),
    Tool("run_tests", "Run the visible tests and report failures.", _params(), run_tests, mutates=False),
    Tool("submit", "Finish the task.", _params(answer="optional final answer"), submit, mutates=False),
)}
"""Every built-in tool by name."""

COMMANDS = frozenset({"run", "bash", "run_tests"})
"""Tools that run code in the workspace (what could leave a symbolic link behind)."""
BASH = Tool("bash",
            "Run one bash command in the workspace (the project's environment on PATH; output capped).",
            _params(command="bash command line"), bash)
"""A terminal, offered by the domains that list it in their `Domain.tools` (the repository domains)."""


def tools_for(task: Task | None) -> dict[str, Tool]:
    """The tools of `task`: the built-ins and its domain's own (`Domain.tools`)."""
    if task is None:
        return TOOLS
    from rlvr.tasks.registry import tools_of

    own = {t.name: t for t in tools_of(task.domain)}
    clash = sorted(set(own) & set(TOOLS))
    if clash:  # a domain's tool never silently replaces a built-in one the model was told about
        raise ValueError(f"domain {task.domain!r} declares a tool named like a built-in one: {clash[0]!r}")
    return {**TOOLS, **own}


def call_tool(name: str, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    """Run tool `name`; unknown tools and bad arguments become an error the model can read."""
    tools = tools_for(ctx.task)
    tool = tools.get(name)
    if tool is None:
        return ToolOutput(f"error: unknown tool {name!r}; tools: {', '.join(tools)}")
    try:
        return tool.fn(ctx, args)
    except ToolArgError as exc:
        return ToolOutput(f"error: {name}: {exc}")
    except (OSError, ValueError) as exc:  # e.g. writing over a directory: the model's mistake, not infra
        return ToolOutput(f"error: {name}: {exc}")
