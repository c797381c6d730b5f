"""rlvr domains and verifiers for TRL's GRPOTrainer: a prompt dataset and a reward function that verifies.

    tasks = load_tasks("code:200", settings={"code": {"tier": "tiny"}})
    trainer = GRPOTrainer(model=..., reward_funcs=reward_function(tasks), train_dataset=build_dataset(tasks), ...)

Each dataset row carries the task's key (`domain/id`) in the `task_id` column; TRL hands that column back to
the reward function, which rebuilds the final state from the completion and judges it with the task's own
verifier. A verdict the verifier could not reach (`infra_error`) is returned as None, which TRL treats as
unscorable (excluded from the baseline, advantage 0) rather than as a reward of 0. Only single-turn tasks fit
TRL's one-completion-per-prompt model; multi-turn tasks, which act through tools, are refused.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scorer
from rlvr.verify.verdict import Verdict

if TYPE_CHECKING:
    from datasets import Dataset

TASK_COLUMN = "task_id"
"""Dataset column holding each row's task key (`domain/id`)."""

TaskInput = str | TaskSource | Sequence[Task]
"""A tasks SPEC (`code:50,math:20`), a task source, or tasks themselves."""


def load_tasks(tasks: TaskInput, *, n: int | None = None, seed: int = 0, offset: int = 0,
               settings: Mapping[str, Mapping[str, Any]] | None = None) -> list[Task]:
    """Resolve `tasks` to a list of single-turn tasks with unique keys.

    `n`, `seed` and `offset` sample a task source (a procedural one needs `n`); `settings` holds per-domain
    settings for a SPEC, like `[tasks.domains]` of a run config.
    """
    if settings and not isinstance(tasks, str):
        raise UserError("domain settings apply to a tasks SPEC only", field="settings",
                        fix="build the source with rlvr.tasks.registry.make(name, **settings) instead")
    if isinstance(tasks, str):
        from rlvr.tasks import registry
        from rlvr.tasks.selection import parse

        out: list[Task] = []
        for sel in parse(tasks):
            source, name = sel.source, sel.source.name
            if settings and name in settings and registry.is_registered(name):
                source = registry.make(name, **settings[name])
            out.extend(source.sample(sel.n if sel.n is not None else n, seed=seed, offset=offset))
        resolved = out
    elif isinstance(tasks, TaskSource):
        resolved = tasks.sample(n, seed=seed, offset=offset)
    else:
        if n is not None or offset:
            raise UserError("n and offset select from a SPEC or a source, not from a list of tasks", field="tasks",
                            fix="slice the list instead")
        resolved = list(tasks)
        if not all(isinstance(t, Task) for t in resolved):
            raise UserError("expected a tasks SPEC, a TaskSource or a list of Task", field="tasks",
                            fix="e.g. load_tasks('code:50')")
    if not resolved:
        raise UserError("no tasks selected", field="tasks", fix="name a domain or pack with at least one task")
    seen: set[str] = set()
    for task in resolved:
        if task.multi_turn:
            raise UserError(f"task {task.key} is multi-turn (max_turns={task.limits.max_turns})", field="tasks",
                            fix="TRL's GRPOTrainer scores one completion per prompt: use single-turn tasks")
        if task.key in seen:
            raise UserError(f"task {task.key} appears twice", field="tasks", fix="select each task once")
        seen.add(task.key)
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
        raise UserError("building a TRL dataset needs the datasets package", fix="pip install 'rlvr[trl]'") from None

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
    raise TypeError(f"unsupported completion type {type(completion).__name__}: expected str or a message list")


class RlvrReward:
    """TRL reward function: `(prompts, completions, task_id=[...], **kwargs) -> list[float | None]`.

    Verification runs on `workers` threads (verifiers spend their time in sandboxed subprocesses). When the
    trainer passes `log_metric`, the batch's pass rate, flagged share and infra errors are logged under `rlvr/`.
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
        """Judge one completion of `task` (a single-turn final state: the answer over the untouched workspace)."""
        final = FinalState(files=dict(task.workspace), answer=completion_text(completion))
        return self.scorer.score(task, final, self.seed).verdict

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
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
