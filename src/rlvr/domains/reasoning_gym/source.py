"""Every dataset of the installed `reasoning_gym` package as its own domain, `rg-<dataset>`.

Registration reads the package's sources (its `register_dataset(...)` calls) instead of importing it, so
listing 100+ domains costs milliseconds; the package itself is imported the first time a task is built.
Task `i` of a domain is item `i` of the dataset built with the domain's seed, size and settings, which
reasoning-gym generates from `Random(seed + i)`: any task is rebuilt exactly from (domain, config, index).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlvr.domains.reasoning_gym.solvers import SOLVERS
from rlvr.errors import UserError
from rlvr.tasks.prompts import with_instruction
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task

PREFIX = "rg-"
VERIFIER_KIND = "reasoning-gym"
EXAMPLE_KEYS = ("possible_answer", "example_answer", "example_correct_answer")
"""Entry metadata keys that hold one valid answer of a dataset with many (its `answer` is None)."""
EXAMPLE_FILE = "example_answer.txt"
"""Hidden file holding that example answer (the gold final state of such a task)."""
SKIPPED = {"composite": "combines other datasets; use the rg-<dataset> domains and a tasks SPEC mix instead"}
"""Datasets of the package that are not domains by themselves, and why."""

NEIGHBOURS = 12
"""How many neighbouring items to try when looking for a wrong answer of the right type."""

_REGISTER_CALL = re.compile(r"^register_dataset\(\s*([A-Za-z_]\w*|\"[^\"]+\"|'[^']+')\s*,\s*(\w+)",
                            re.MULTILINE)


def quiet() -> contextlib.AbstractContextManager[Any]:
    """Swallow what a dataset prints (bf's interpreter prints progress) so it cannot corrupt our output."""
    return contextlib.redirect_stdout(io.StringIO())


class ReasoningGymConfig(BaseModel):
    """Settings of one reasoning-gym domain. Any other key is a field of the dataset's own config dataclass
    (its generator and difficulty settings, e.g. `min_digits` or `max_depth`), checked when the domain is
    made."""

    model_config = ConfigDict(extra="allow", frozen=True)

    seed: int = 0
    """Seed of the dataset; item i is generated from Random(seed + i)."""
    size: int = Field(500, ge=1, le=10_000_000)
    """Number of tasks (reasoning-gym datasets are finite and indexed)."""
    level: int | None = Field(None, ge=0, le=20)
    """Difficulty level from the dataset's curriculum (0 easiest); sets its difficulty settings, which
    explicit settings still override. None: the dataset's defaults."""


def _package_root() -> Path | None:
    spec = importlib.util.find_spec("reasoning_gym")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _docline(source: str, cls: str) -> str:
    m = re.search(rf"^class {cls}\b[^:]*:\s*(?:\"\"\"|''')\s*(.*?)\s*$", source, re.MULTILINE)
    return m.group(1).replace('"""', "").replace("'''", "").strip() if m else ""


@functools.cache
def scan_datasets() -> dict[str, tuple[str, str]]:
    """{dataset name: (category, one-line description)} read from the package's sources without importing
    it."""
    root = _package_root()
    found: dict[str, tuple[str, str]] = {}
    if root is None:
        return found
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        if "register_dataset(" not in source:
            continue
        for m in _REGISTER_CALL.finditer(source):
            arg = m.group(1)
            if arg[0] in "\"'":
                name = arg[1:-1]
            else:
                const = re.search(rf"^{arg}\s*=\s*[\"']([^\"']+)[\"']", source, re.MULTILINE)
                if const is None:
                    continue
                name = const.group(1)
            category = path.relative_to(root).parts[0] if len(path.relative_to(root).parts) > 1 else "misc"
            found[name] = (category, _docline(source, m.group(2)))
    return found


def _dataset_classes(name: str) -> tuple[type, type]:
    import reasoning_gym  # noqa: F401  (imports every dataset module, filling the factory registry)
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        raise UserError(f"reasoning-gym has no dataset {name!r}", field="domain", fix="see `rlvr tasks list`")
    return DATASETS[name]


def settings_of(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Check `settings` against the dataset's config dataclass; unknown keys raise UserError naming the valid
    ones."""
    import dataclasses

    _, config_cls = _dataset_classes(name)
    fields = {f.name for f in dataclasses.fields(config_cls)} - {"seed", "size"}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise UserError(f"unknown setting {unknown[0]!r} for reasoning-gym dataset {name!r}",
                        field=f"{PREFIX}{name}.{unknown[0]}",
                        fix=f"valid settings: {', '.join(sorted(fields))}")
    return dict(settings)


def level_settings(name: str, level: int) -> dict[str, Any]:
    """The difficulty settings of curriculum level `level` of a dataset (its range and scalar attributes)."""
    _dataset_classes(name)
    from reasoning_gym.factory import CURRICULA, create_curriculum

    if name not in CURRICULA:
        raise UserError(f"reasoning-gym dataset {name!r} has no curriculum, so no levels",
                        field=f"{PREFIX}{name}.level",
                        fix="set its difficulty fields directly instead")
    curriculum = create_curriculum(name)
    curriculum.set_global_level(level)
    generated = curriculum.generate_configuration({"seed": 0, "size": 1})
    fields: list[str] = []
    for attr in curriculum.attributes.values():
        fields += [getattr(attr, key) for key in ("lower_field_name", "upper_field_name", "field_name")
                   if getattr(attr, key, None)]
    return {f: getattr(generated, f) for f in fields}


@functools.lru_cache(maxsize=64)
def _build(name: str, seed: int, size: int, settings_json: str) -> Any:
    from reasoning_gym.factory import create_dataset

    _dataset_classes(name)
    settings = json.loads(settings_json)
    try:
        with quiet():
            return create_dataset(name, seed=seed, size=size, **settings)
    except (AssertionError, ValueError, TypeError) as exc:
        raise UserError(f"invalid settings for reasoning-gym dataset {name!r}: {exc or type(exc).__name__}",
                        field=f"{PREFIX}{name}",
                        fix="check the values against the dataset's config") from None


def dataset(name: str, seed: int, size: int, settings: dict[str, Any]) -> Any:
    """The reasoning-gym dataset object (cached: the verifier rebuilds entries from it)."""
    return _build(name, seed, size, json.dumps(settings, sort_keys=True, default=str))


@functools.lru_cache(maxsize=512)
def _item(name: str, seed: int, size: int, settings_json: str, index: int) -> dict[str, Any]:
    ds = _build(name, seed, size, settings_json)
    try:
        with quiet():
            return ds[index]  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001  (a generator that cannot satisfy its settings)
        raise UserError(f"reasoning-gym cannot generate item {index} of {name!r} with these settings: {exc}",
                        field=f"{PREFIX}{name}", fix="choose easier settings or a lower level") from None


def item(name: str, seed: int, size: int, settings: dict[str, Any], index: int) -> dict[str, Any]:
    """Item `index` of a dataset (cached: some generators take a second per item). Treat it as read-only."""
    return _item(name, seed, size, json.dumps(settings, sort_keys=True, default=str), index)


def entry_of(task: Task) -> dict[str, Any]:
    """The reasoning-gym entry (question, answer, metadata) a task was built from."""
    meta = task.metadata
    return item(meta["dataset"], int(meta["rg_seed"]), int(meta["rg_size"]), dict(meta.get("settings", {})),
                int(task.index or 0))


class ReasoningGymSource(TaskSource):
    """One reasoning-gym dataset as an indexed task source."""

    def __init__(self, dataset_name: str, config: ReasoningGymConfig) -> None:
        self.dataset_name = dataset_name
        self.config = config
        self.settings = dict(config.model_extra or {})
        self.name = PREFIX + dataset_name
        if config.level is not None:
            self.settings = {**level_settings(dataset_name, config.level), **self.settings}
        if self.settings:  # fail at make time, not at the first task, when a setting is wrong
            settings_of(dataset_name, self.settings)
            dataset(dataset_name, config.seed, config.size, self.settings)

    @property
    def size(self) -> int:
        return self.config.size

    def id_at(self, index: int) -> str:
        return f"s{self.config.seed}-{index}"

    def get(self, index: int) -> Task:
        if not 0 <= index < self.size:
            raise UserError(f"index {index} out of range for {self.name!r} (size {self.size})",
                            fix=f"use 0..{self.size - 1} or set size")
        entry = self._item(index)
        answer = entry.get("answer")
        difficulty = (entry.get("metadata") or {}).get("difficulty")
        example = _answer_or_example(entry) if answer is None else None
        if example is not None and not _accepted(self._dataset(), example, entry):
            example = None  # the package's example does not solve its own item (seen at high levels)
        hidden = {EXAMPLE_FILE: example} if example is not None else {}
        return Task(
            id=self.id_at(index), domain=self.name, prompt=with_instruction(str(entry["question"])),
            tier=None if self.config.level is None else f"level-{self.config.level}",
            answer=answer if answer is None else str(answer), hidden=hidden,
            metadata={"dataset": self.dataset_name, "settings": self.settings, "rg_seed": self.config.seed,
                      "rg_size": self.config.size,
                      "rg_difficulty": json.loads(json.dumps(difficulty, default=str)) if difficulty
                      else None},
            source=f"{self.name}:{self.config.seed}:{index}", seed=self.config.seed, index=index,
        )

    def reference(self, task: Task) -> str | None:
        """One valid answer: the entry's answer, the dataset's example, or a reference solver's answer."""
        if task.answer is not None:
            return str(task.answer)
        if EXAMPLE_FILE in task.hidden:
            return task.hidden[EXAMPLE_FILE]
        solver = SOLVERS.get(self.dataset_name)
        return solver(entry_of(task)) if solver is not None else None

    def gold(self, task: Task) -> FinalState | None:
        gold = self.reference(task)
        return None if gold is None else FinalState(answer=f"<answer>{gold}</answer>")

    def negatives(self, task: Task) -> dict[str, FinalState]:
        controls = super().negatives(task)
        gold = self.reference(task)
        wrong = self.wrong_answer(task)
        if wrong is not None:
            controls["wrong_answer"] = FinalState(answer=f"<answer>{wrong}</answer>")
            if gold is not None:
                controls["buried_answer"] = FinalState(answer=f"<answer>{wrong}\n{gold}\n{wrong}</answer>")
                controls["hedged_answers"] = FinalState(answer=f"<answer>{wrong}</answer>\n"
                                                               f"<answer>{gold}</answer>")
        if gold is not None:
            controls["answer_in_prose"] = FinalState(answer=f"<answer>It is not {gold}.</answer>")
        return controls

    def _dataset(self) -> Any:
        return dataset(self.dataset_name, self.config.seed, self.config.size, self.settings)

    def _item(self, index: int) -> dict[str, Any]:
        return item(self.dataset_name, self.config.seed, self.config.size, self.settings, index)

    def wrong_answer(self, task: Task) -> str | None:
        """A wrong answer of the right type: the answer of a neighbouring item, preferring one that this
        item's own scorer rejects (a lenient scorer may accept them all; the strict verifier still must
        not)."""
        # the task's own dataset parameters: a proof may hand a task to a source made with other settings
        meta = task.metadata
        seed, size, settings = int(meta["rg_seed"]), int(meta["rg_size"]), dict(meta.get("settings", {}))
        ds = dataset(self.dataset_name, seed, size, settings)
        index = int(task.index or 0)
        entry = item(self.dataset_name, seed, size, settings, index)
        gold = self.reference(task)
        gold = " ".join(gold.split()) if gold is not None else None
        fallback: str | None = None
        for step in range(1, min(size, NEIGHBOURS + 1)):
            neighbour = item(self.dataset_name, seed, size, settings, (index + step) % size)
            other = _answer_or_example(neighbour)
            if other is None and self.dataset_name in SOLVERS:
                other = SOLVERS[self.dataset_name](neighbour)
            if other is None or " ".join(str(other).split()) == gold:
                continue
            if not _accepted(ds, str(other), entry):
                return str(other)
            fallback = fallback or str(other)
        # many-solution scorers must reject it themselves
        return fallback if task.answer is not None else None


def _accepted(ds: Any, answer: str, entry: dict[str, Any]) -> bool:
    try:
        with quiet():
            return float(ds.score_answer(answer, entry)) >= 1.0
    except Exception:  # noqa: BLE001  (a scorer that chokes on the value rejects it)
        return False


def _answer_or_example(entry: dict[str, Any]) -> str | None:
    if entry.get("answer") is not None:
        return str(entry["answer"])
    meta = entry.get("metadata") or {}
    example = next((meta[k] for k in EXAMPLE_KEYS if k in meta), None)
    if example is None:
        return None
    return example if isinstance(example, str) else json.dumps(example)
