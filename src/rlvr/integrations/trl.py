"""rlvr domains and verifiers for TRL's GRPOTrainer: a reward function that verifies single-turn completions,
and an `environment_factory` whose tools act in rlvr's sandbox for multi-turn (and single-turn) tasks.

    tasks = load_tasks("code:200", settings={"code": {"tier": "tiny"}})
    trainer = GRPOTrainer(model=..., reward_funcs=reward_function(tasks), train_dataset=build_dataset(tasks),
    ...)

    Env = environment_factory("code:64")               # multi-turn: tools in the sandbox, reward at the end
    trainer = GRPOTrainer(model=..., environment_factory=Env, train_dataset=dataset(Env), ...)

Each dataset row carries the task's key (`domain/id`) in the `task_id` column; TRL hands that column back to
the reward function, which rebuilds the final state from the completion and judges it with the task's own
verifier. A verdict the verifier could not reach (`infra_error`) is returned as None, which TRL treats as
unscorable (excluded from the baseline, advantage 0) rather than as a reward of 0. The reward function takes
single-turn tasks only (one completion per prompt); tool-using tasks go through `environment_factory`, whose
instances run each tool call in the rollout's own sandbox lease and score the final state with the same
Scorer.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rlvr.errors import UserError
from rlvr.integrations.session import Runtime, TaskInput, resolve_tasks, tool_specs
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scored, Scorer
from rlvr.verify.verdict import Verdict

if TYPE_CHECKING:
    from datasets import Dataset

TASK_COLUMN = "task_id"
"""Dataset column holding each row's task key (`domain/id`)."""

def load_tasks(tasks: TaskInput, *, n: int | None = None, seed: int = 0, offset: int = 0,
               settings: Mapping[str, Mapping[str, Any]] | None = None) -> list[Task]:
    """Resolve `tasks` to a list of single-turn tasks with unique keys
    (`rlvr.integrations.session.resolve_tasks`).

    `n`, `seed` and `offset` sample a task source (a procedural one needs `n`); `settings` holds per-domain
    settings for a SPEC, like `[tasks.domains]` of a run config.
    """
    resolved = resolve_tasks(tasks, n=n, seed=seed, offset=offset, settings=settings)
    for task in resolved:
        if task.multi_turn:
            raise UserError(f"task {task.key} is multi-turn (max_turns={task.limits.max_turns})",
                            field="tasks",
                            fix="a reward function scores one completion per prompt: use "
                                "single-turn tasks, or environment_factory(tasks) for tool-using ones")
    return resolved


def build_dataset(tasks: TaskInput, *, conversational: bool = True, system_prompt: str | None = None,
                  **select: Any) -> Dataset:
    """A `datasets.Dataset` of prompts with a `task_id` column (the task key), ready for GRPOTrainer.

    `conversational` gives chat-format prompts (a list of messages, the trainer applies the chat template);
    otherwise the prompt is the task's text, which suits completion-style prompts (the code domain's tiny tier
    ends in `return `). `select` is passed to `load_tasks`.
    """
    try:
        from datasets import Dataset
    except ModuleNotFoundError:
        raise UserError("building a TRL dataset needs the datasets package",
                        fix="pip install 'rlvr[trl]'") from None

    resolved = load_tasks(tasks, **select)
    rows: dict[str, list[Any]] = {"prompt": [], TASK_COLUMN: []}
    for task in resolved:
        if conversational:
            head = [{"role": "system", "content": system_prompt}] if system_prompt else []
            rows["prompt"].append([*head, {"role": "user", "content": task.prompt}])
        else:
            rows["prompt"].append(f"{system_prompt}\n\n{task.prompt}" if system_prompt else task.prompt)
        rows[TASK_COLUMN].append(task.key)
    return Dataset.from_dict(rows)


def completion_text(completion: Any) -> str:
    """The answer text of one TRL completion: a string, or the last assistant message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], Mapping):
        content = completion[-1].get("content", "")
        if isinstance(content, str):
            return content
        if isinstance(content, Sequence):  # multimodal parts: keep the text ones
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return ""
    if isinstance(completion, Sequence) and not completion:
        return ""
    raise TypeError(f"unsupported completion type {type(completion).__name__}: expected str or a "
                    f"message list")


class RlvrReward:
    """TRL reward function: `(prompts, completions, task_id=[...], **kwargs) -> list[float | None]`.

    Verification runs on `workers` threads (verifiers spend their time in sandboxed subprocesses). When the
    trainer passes `log_metric`, the batch's pass rate, flagged share and infra errors are logged under
    `rlvr/`.
    """

    __name__ = "rlvr"

    def __init__(self, tasks: list[Task], scorer: Scorer, *, seed: int = 0, workers: int = 2) -> None:
        self.tasks = {t.key: t for t in tasks}
        self.scorer = scorer
        self.seed = seed
        self.workers = max(1, workers)
        self.last_verdicts: list[Verdict] = []
        """Verdicts of the latest call, in completion order (for inspection and tests)."""

    def task_for(self, task_id: object) -> Task:
        """The task of a dataset row's `task_id`; an unknown one raises UserError."""
        task = self.tasks.get(str(task_id))
        if task is None:
            raise UserError(f"unknown task {task_id!r} in column {TASK_COLUMN!r}", field=TASK_COLUMN,
                            fix="build the dataset and the reward function from the same tasks")
        return task

    def verdict(self, task: Task, completion: Any) -> Verdict:
        """Judge one completion of `task` (a single-turn final state: the answer over the untouched
        workspace)."""
        final = FinalState(files=dict(task.workspace), answer=completion_text(completion))
        return self.scorer.score(task, final, self.seed).verdict

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 **kwargs: Any) -> list[float | None]:
        ids = kwargs.get(TASK_COLUMN)
        if ids is None:
            raise UserError(f"the dataset has no {TASK_COLUMN!r} column", field=TASK_COLUMN,
                            fix="build it with rlvr.integrations.trl.build_dataset")
        if len(ids) != len(completions):
            raise ValueError(f"{len(ids)} task ids for {len(completions)} completions")
        tasks = [self.task_for(i) for i in ids]
        if self.workers == 1 or len(tasks) == 1:
            verdicts = [self.verdict(t, c) for t, c in zip(tasks, completions, strict=True)]
        else:
            with ThreadPoolExecutor(self.workers) as ex:
                verdicts = list(ex.map(self.verdict, tasks, completions))
        self.last_verdicts = verdicts
        rewards = [None if v.infra_error else self.scorer.reward(v) for v in verdicts]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and verdicts:
            _log_batch(log_metric, verdicts)
        return rewards


def _log_batch(log_metric: Callable[[str, float], None], verdicts: list[Verdict]) -> None:
    judged = [v for v in verdicts if not v.infra_error]
    log_metric("rlvr/infra_errors", float(len(verdicts) - len(judged)))
    if judged:
        log_metric("rlvr/pass_rate", sum(v.passed for v in judged) / len(judged))
        log_metric("rlvr/flagged", sum(bool(v.flags) for v in judged) / len(judged))


def reward_function(tasks: TaskInput, *, pool: SandboxPool | None = None, seed: int = 0,
                    flag_penalty: float = 0.0, workers: int = 2, **select: Any) -> RlvrReward:
    """A TRL reward function that verifies each completion with rlvr's verifier for its task.

    `tasks` is resolved by `load_tasks` (`select` holds its n / seed / offset / settings); build the dataset
    from the same arguments. `pool` runs candidate code for verifiers that need a sandbox; `seed` seeds
    randomised hidden cases; `flag_penalty` is the reward of a completion flagged as a reward hack.
    """
    resolved = load_tasks(tasks, **select)
    return RlvrReward(resolved, Scorer(pool, flag_penalty=flag_penalty), seed=seed, workers=workers)


# ------------------------------------------------------------------------------------ environment_factory
class RlvrToolEnv:
    """One rollout of GRPOTrainer's `environment_factory`: rlvr's tools as methods, rlvr's verdict as reward.

    TRL builds instances with no arguments (`environment_factory(tasks)` binds the tasks), calls
    `reset(**row)` before generation (the return value, the task's prompt, is appended to the row's last user
    message), exposes every public method as a tool, and calls `get_reward()` once the rollout ends. The tool
    methods are made by `environment_factory` from rlvr's tool table (`rlvr.envs.tools.tools_for`): one typed,
    documented method per tool the tasks offer (`write_file(path, content)`, `run_tests()`, ...). A multi-turn
    task holds a sandbox lease from `reset` to `get_reward`; a single-turn task answers through `submit`. A
    verdict the verifier could not reach gives None (TRL ignores it) rather than 0.
    """

    runtime: Runtime
    """Bound by `environment_factory`: the tasks, the sandbox pool and the Scorer of every instance."""

    def __init__(self) -> None:
        self._session = self.runtime.session()
        self.last_scored: Scored | None = None
        """The verdict and reward of the latest rollout (for inspection and tests)."""

    def reset(self, **row: Any) -> str:
        """Start a rollout on the row's task (`task_id` column); returns the task's prompt."""
        task = self.runtime.task(row.get(TASK_COLUMN))
        self._session.start(task, int(row.get("seed") or 0))
        self.last_scored = None
        return task.prompt

    def get_reward(self) -> float | None:
        """rlvr's reward for the rollout's final state (None when the verifier could not judge it)."""
        self.last_scored = self._session.finish()
        return None if self.last_scored.infra_error else self.last_scored.reward

    def _call(self, name: str, **arguments: Any) -> str:
        return self._session.call(name, arguments)[0]


_JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


def _tool_method(spec: Mapping[str, Any]) -> Callable[..., str]:
    """A typed, documented method for one rlvr tool (its JSON schema as a signature and a Google-style
    docstring, which transformers' tool-schema inference reads); calling it runs the tool in the sandbox."""
    import inspect

    fn_spec = spec["function"]
    name, params = fn_spec["name"], fn_spec["parameters"]
    required = set(params.get("required", []))
    props = params.get("properties", {})
    order = [a for a in props if a in required] + [a for a in props if a not in required]
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    doc_args = []
    for arg in order:
        kind = _JSON_TYPES.get(props[arg].get("type", "string"), str)
        default = inspect.Parameter.empty if arg in required else ("" if kind is str else None)
        sig_params.append(inspect.Parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                            annotation=kind))
        annotations[arg] = kind if arg in required or kind is str else kind | None
        doc_args.append(f"    {arg}: {props[arg].get('description') or arg}")
    signature = inspect.Signature(sig_params, return_annotation=str)

    def method(*args: Any, **kwargs: Any) -> str:
        # a missing or unknown argument is a TypeError, as for any method
        bound = signature.bind(*args, **kwargs)
        self = bound.arguments.pop("self")
        given = {k: v for k,
                 v in bound.arguments.items() if not (v is None or (v == "" and k not in required))}
        return self._call(name, **given)

    method.__name__ = method.__qualname__ = name
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__doc__ = fn_spec["description"] + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "")
    return method


def environment_factory(tasks: TaskInput, *, pool: SandboxPool | None = None, flag_penalty: float = 0.0,
                        max_turns: int | None = None, **select: Any) -> type[RlvrToolEnv]:
    """The class to pass as GRPOTrainer's `environment_factory`, bound to `tasks` (resolved by
    `rlvr.integrations.session.resolve_tasks`; `select` holds its n / seed / offset / settings).

    Every instance shares one sandbox pool (`pool`, or one started on first use) and one Scorer. `max_turns`
    overrides the tasks' turn budgets (set it to GRPOConfig's `max_tool_calling_iterations` + 1).
    """
    runtime = Runtime(resolve_tasks(tasks, **select), pool=pool, flag_penalty=flag_penalty,
                      max_turns=max_turns)
    specs = {s["function"]["name"]: s for t in runtime.tasks for s in tool_specs(t)}  # every task's tools
    methods = {name: _tool_method(spec) for name, spec in specs.items()}
    return type("RlvrEnv", (RlvrToolEnv,), {"runtime": runtime, "__doc__": RlvrToolEnv.__doc__, **methods})


def dataset(tasks: TaskInput | type[RlvrToolEnv], *, system_prompt: str | None = None,
            **select: Any) -> Dataset:
    """The `datasets.Dataset` matching an environment factory: one row per task, a `task_id` column (the key)
    and a `prompt` whose last user message is empty, since `reset` appends the task's prompt to it. Pass the
    class from `environment_factory` (its tasks) or the same tasks and `select`."""
    try:
        from datasets import Dataset
    except ModuleNotFoundError:
        raise UserError("building a TRL dataset needs the datasets package",
                        fix="pip install 'rlvr[trl]'") from None

    if isinstance(tasks, type) and issubclass(tasks, RlvrToolEnv):
        resolved = tasks.runtime.tasks
    else:
        resolved = resolve_tasks(tasks, **select)
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return Dataset.from_dict({"prompt": [[*head, {"role": "user", "content": ""}] for _ in resolved],
                              TASK_COLUMN: [t.key for t in resolved]})
