"""Per-task pass rates as exponential moving averages, kept with a run and reusable by the next one."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlvr.atomic import atomic_write
from rlvr.errors import UserError

PASS_RATES_SCHEMA_VERSION = 1


class TaskStat(BaseModel):
    """What the scheduler knows about one task."""

    model_config = ConfigDict(extra="forbid")

    ema: float = Field(ge=0.0, le=1.0)
    """Pass-rate EMA over observation rounds (the first round sets it outright)."""
    episodes: int = Field(0, ge=0)
    """Unmasked episodes observed."""
    passed: int = Field(0, ge=0)
    """Of those, how many passed."""
    rounds: int = Field(0, ge=0)
    """Observation rounds (calls to `observe` that saw this task)."""
    last_step: int = 0
    """Step of the latest episode seen."""
    source: str | None = None
    """Name of the scheduler stream (domain or pack) that served the task, if known."""
    index: int | None = Field(None, ge=0)
    """Index of the task in that stream's source, so a later run can revisit it."""


class PassRatesFile(BaseModel):
    """The JSON layout of a pass-rates file."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = PASS_RATES_SCHEMA_VERSION
    """Version of this layout."""
    ema: float = Field(gt=0, le=1)
    """EMA weight the rates were computed with (for the record)."""
    tasks: dict[str, TaskStat] = Field(default_factory=dict)
    """Task key (`domain/id`) -> its statistics."""


class PassRateTable:
    """Task key -> TaskStat, updated once per observation round with weight `alpha` for the new rate."""

    def __init__(self, alpha: float) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"EMA weight must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self._stats: dict[str, TaskStat] = {}

    def __len__(self) -> int:
        return len(self._stats)

    def __contains__(self, key: object) -> bool:
        return key in self._stats

    def __iter__(self) -> Iterator[str]:
        return iter(self._stats)

    def items(self) -> list[tuple[str, TaskStat]]:
        return list(self._stats.items())

    def get(self, key: str) -> TaskStat | None:
        return self._stats.get(key)

    def rate(self, key: str | None) -> float | None:
        """The pass-rate EMA of `key`, or None when it was never observed."""
        stat = self._stats.get(key) if key is not None else None
        return stat.ema if stat is not None else None

    def update(self, key: str, passed: Iterable[bool], *, step: int = 0, source: str | None = None,
               index: int | None = None) -> TaskStat | None:
        """Fold one round of outcomes of `key` into its EMA; an empty round changes nothing."""
        outcomes = list(passed)
        if not outcomes:
            return self._stats.get(key)
        rate = sum(outcomes) / len(outcomes)
        old = self._stats.get(key)
        if old is None:
            new = TaskStat(ema=rate, episodes=len(outcomes), passed=sum(outcomes), rounds=1, last_step=step,
                           source=source, index=index)
        else:
            ema = (1.0 - self.alpha) * old.ema + self.alpha * rate
            new = TaskStat(ema=min(1.0, max(0.0, ema)), episodes=old.episodes + len(outcomes),
                           passed=old.passed + sum(outcomes), rounds=old.rounds + 1,
                           last_step=max(old.last_step, step), source=source or old.source,
                           index=index if index is not None else old.index)
        self._stats[key] = new
        return new

    def to_dict(self) -> dict[str, object]:
        """The table as JSON-ready data (the pass-rates file layout)."""
        return PassRatesFile(ema=self.alpha, tasks=dict(self._stats)).model_dump(mode="json")

    def load_dict(self, data: object, origin: str = "pass rates") -> None:
        """Replace the table by `data` (the pass-rates file layout); bad data raises UserError naming
        `origin`."""
        try:
            parsed = PassRatesFile.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "(file)"
            raise UserError(err["msg"], file=origin, field=loc,
                            fix="give a file written by save_pass_rates (pass_rates.json of a run)") from None
        if parsed.schema_version != PASS_RATES_SCHEMA_VERSION:
            raise UserError(f"unsupported schema_version {parsed.schema_version}", file=origin,
                            field="schema_version",
                            fix=f"this rlvr reads version {PASS_RATES_SCHEMA_VERSION}")
        self._stats = dict(parsed.tasks)

    def save(self, path: str | Path) -> Path:
        """Write the table as JSON atomically (a crash never leaves half a file)."""
        return atomic_write(path, json.dumps(self.to_dict(), indent=1, sort_keys=True))

    def load(self, path: str | Path) -> None:
        """Read a table written by `save`; a missing or malformed file raises UserError naming it."""
        path = Path(path)
        if not path.is_file():
            raise UserError("no such pass-rates file", file=path, field="schedule.pass_rates_from",
                            fix="give the pass_rates.json of an earlier run")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"not valid JSON: {exc}", file=path,
                            fix="give a file written by save_pass_rates") from None
        self.load_dict(data, origin=str(path))
