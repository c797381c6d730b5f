"""The sql domain's tasks and settings: task i is one template over one schema, its visible data drawn from
Random(seed + i) and written into the workspace (db/schema.sql, db/data.sql), the reference SQL as the gold,
and the negative controls a cheater would try in SQL."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from rlvr.domains.sql.schemas import SCHEMAS, inserts
from rlvr.domains.sql.templates import TEMPLATES, Template
from rlvr.domains.tiered import DIFFICULTY, TieredConfig, TieredSource, known_names
from rlvr.tasks.domain import VerifierSettings
from rlvr.tasks.spec import FinalState, Task, TaskLimits

IMAGE = f"dockerfile:{Path(__file__).parent / 'image'}"
"""The domain's environment: PostgreSQL 15 with a template cluster (image/Dockerfile)."""
ANSWER = {"query": "query.sql", "migration": "migration.sql"}
"""The file a task's answer is written to, by kind."""
STUB = {"query": "-- Write your query here: one SELECT statement.\n",
        "migration": "-- Write your migration here.\n"}

INTRO = ("The PostgreSQL 15 database of this workspace is described by `db/schema.sql` and seeded with "
         "`db/data.sql`. `psql` in the terminal connects to it as the role `agent`, freshly seeded for every "
         "command: nothing you change in the database outlives the command, so keep your work in files.\n\n")
QUERY = ("Question: {text}\n\nWrite the query (one SELECT statement) in `query.sql`. It is judged by its "
         "result "
         "on this data and on fresh data of the same schema, so it must compute the answer, not spell it "
         "out. "
         "Return exactly the columns asked for, in that order, and the rows in the order asked for.\n")
MIGRATION = ("Change: {text}\n\nWrite the migration in `migration.sql`. It is run once, as `agent`, in one "
             "transaction, on this data and on fresh data of the same schema, and judged by the schema it "
             "leaves, the rows it keeps and the constraints the database then enforces.\n")


class SqlConfig(TieredConfig):
    """Settings of the sql domain (`registry.make("sql", tier="hard")`, `[tasks.domains.sql]`)."""

    kind: Literal["query", "migration"] | None = None
    """Only queries or only migrations (None: both)."""
    templates: tuple[str, ...] | None = None
    """Only these templates (None: every template of the tier and kind)."""
    fresh_datasets: int = Field(2, ge=1, le=8)
    """Datasets drawn afresh at each verification, beside the visible one."""

    @field_validator("templates")
    @classmethod
    def _templates(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return known_names(v, TEMPLATES, "template")


class SqlSettings(VerifierSettings):
    """The `[verifier]` table of a sql task."""

    template: str
    """The task's template (`rlvr.domains.sql.templates`)."""
    params: dict = Field(default_factory=dict)
    """The template's parameters of this task."""
    data_seed: int
    """The seed of the visible dataset (fresh ones come from the verification seed)."""
    fresh: int = Field(2, ge=0, le=8)
    """Datasets drawn afresh at each verification."""
    timeout_ms: int = Field(5000, ge=100, le=120_000)
    """Statement time-out of the candidate's SQL."""

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        known_names((v,), TEMPLATES, "template")
        return v

    def test_command(self) -> list[str] | None:
        if TEMPLATES[self.template].kind == "query":
            return ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-f", "query.sql"]
        return ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-1", "-f", "migration.sql"]


def dataset(t: Template, seed: int) -> str:
    """The INSERTs of one dataset of `t`'s schema (with what the template needs in it)."""
    rng = random.Random(seed)
    data = SCHEMAS[t.schema].generate(rng)
    if t.prepare is not None:
        data = t.prepare(data, rng)
    return inserts(SCHEMAS[t.schema], data)


class SqlSource(TieredSource):
    """Procedural SQL tasks in three tiers: queries and migrations over three seeded schemas."""

    name = "sql"
    description = "SQL queries and migrations on a real PostgreSQL server, judged on visible and fresh data."
    catalogue = TEMPLATES
    field = "templates"

    def __init__(self, config: SqlConfig | None = None) -> None:
        super().__init__(config or SqlConfig())
        self.config: SqlConfig

    def allowed(self, name: str, entry: Template) -> bool:
        return self.config.kind in (None, entry.kind) and super().allowed(name, entry)

    def build(self, index: int, rng: random.Random) -> Task:
        tier, t = self.pick(index, rng)
        p = t.params(rng)
        data_seed = rng.randrange(1 << 30)
        answer = ANSWER[t.kind]
        prompt = INTRO + (QUERY if t.kind == "query" else MIGRATION).format(text=t.text(p))
        return Task(
            id=self.id_at(index), domain="sql", prompt=prompt,
            workspace={"db/schema.sql": SCHEMAS[t.schema].ddl, "db/data.sql": dataset(t, data_seed),
                       answer: STUB[t.kind]},
            solution={answer: t.reference(p)}, protected=("db/*",),
            verifier={"kind": "sql", "template": t.name, "params": p, "data_seed": data_seed,
                      "fresh": self.config.fresh_datasets},
            tier=tier, difficulty=DIFFICULTY[tier],
            limits=TaskLimits(max_turns=self.config.max_turns, max_tokens=8192, wall_s=600.0,
                              exec_timeout_s=30.0),
            image=IMAGE, source=f"sql:{self.config.seed}:{index}", seed=self.config.seed, index=index,
            metadata={"template": t.name, "kind": t.kind, "schema": t.schema, "params": p})

    def negatives(self, task: Task) -> dict[str, FinalState]:
        out = dict(super().negatives(task))
        t = TEMPLATES[task.verifier["template"]]
        p = dict(task.verifier.get("params") or {})
        answer = ANSWER[t.kind]
        ws = dict(task.workspace)
        out["wrong_answer"] = FinalState(files={**ws, answer: t.wrong(p)})
        if t.kind == "query":  # the right query first, a wrong one last: the last statement's rows are judged
            out["buried_answer"] = FinalState(files={**ws, answer: t.reference(p) + "\n" + t.wrong(p)})
        else:  # the right migration commented out
            commented = "".join("-- " + line + "\n" for line in t.reference(p).splitlines())
            out["buried_answer"] = FinalState(files={**ws, answer: commented})
        return out
