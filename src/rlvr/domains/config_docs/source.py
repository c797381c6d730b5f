"""Configuration generation: deployments of services and CI pipelines, written as JSON from a prose brief.

Each task carries its JSON Schema (`hidden/schema.json`) and its requirements (`hidden/requirements.json`);
the verifier validates the answer against the schema with `jsonschema` and compiles the requirements into one
check per rule (unique ports, references that resolve, limits within bounds, what the brief asked for).
Task `i` is built from `Random(seed + i)`.
"""
from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rlvr.tasks.prompts import JSON_INSTRUCTION, with_instruction
from rlvr.tasks.source import ProceduralSource
from rlvr.tasks.spec import FinalState, Task

TIERS = ("easy", "medium", "hard")
NAMES = ("api", "web", "db", "cache", "worker", "auth", "search", "billing", "queue", "metrics", "gateway",
         "mailer")
STAGES = ("lint", "build", "unit-test", "integration-test", "package", "scan", "deploy-staging", "smoke-test",
          "deploy-prod", "docs")
IMAGES = ("python:3.11-slim", "node:20-alpine", "golang:1.22", "rust:1.78", "alpine:3.19")

DEPLOYMENT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "required": ["services"], "additionalProperties": False,
    "properties": {"services": {"type": "object", "minProperties": 1, "additionalProperties": {
        "type": "object", "required": ["image", "port", "replicas", "memory_mb"],
        "additionalProperties": False,
        "properties": {
            "image": {"type": "string", "pattern": "^[a-z0-9./-]+:[A-Za-z0-9._-]+$"},
            "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            "replicas": {"type": "integer", "minimum": 0},
            "memory_mb": {"type": "integer", "minimum": 1},
            "depends_on": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
        }}}},
}
PIPELINE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "required": ["stages"], "additionalProperties": False,
    "properties": {"stages": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["name", "image", "script"], "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"},
            "image": {"type": "string"},
            "script": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "needs": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "timeout_minutes": {"type": "integer", "minimum": 1},
        }}}},
}


class ConfigDomainConfig(BaseModel):
    """Settings of the `config` domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the generator; task i is built from Random(seed + i)."""
    tier: Literal["easy", "medium", "hard"] | None = None
    """Difficulty tier (number of services or stages); None cycles easy, medium, hard by index."""
    kind: Literal["deployment", "pipeline"] | None = None
    """Only one kind of configuration; None alternates by index."""


def _dag(rng: random.Random, names: list[str], p: float) -> dict[str, list[str]]:
    """Dependencies that only point to earlier names, so the graph is acyclic."""
    return {n: sorted(m for m in names[:i] if rng.random() < p) for i, n in enumerate(names)}


Generated = tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]
"""(brief, requirements, gold config, JSON schema)."""


def _deployment(rng: random.Random, count: int) -> Generated:
    names = rng.sample(NAMES, count)
    deps = _dag(rng, names, 0.4)
    ports = rng.sample(range(2000, 9999), count)
    budget_total = 0
    services: dict[str, Any] = {}
    gold: dict[str, Any] = {}
    lines = []
    for name, port in zip(names, ports):
        lo = rng.randint(1, 3)
        hi = lo + rng.randint(0, 3)
        mem = rng.choice([128, 256, 512, 1024])
        image = f"registry.local/{name}:{rng.randint(1, 9)}.{rng.randint(0, 20)}"
        env = {"LOG_LEVEL": rng.choice(["info", "debug", "warn"])} if rng.random() < 0.5 else {}
        services[name] = {"image": image, "port": port, "replicas": [lo, hi], "memory_mb": [64, mem],
                          "depends_on": deps[name], "env": env}
        gold[name] = {"image": image, "port": port, "replicas": lo, "memory_mb": mem,
                      "depends_on": deps[name], "env": env}
        budget_total += lo * mem
        need = f"between {lo} and {hi} replicas" if hi > lo else f"exactly {lo} replica{'s' * (lo > 1)}"
        dep = f", depends on {', '.join(f'`{d}`' for d in deps[name])}" if deps[name] else ", no dependencies"
        envs = "".join(f", environment variable `{k}={v}`" for k, v in env.items())
        lines.append(f"- `{name}`: image `{image}`, port {port}, {need}, at most {mem} MiB per "
                     f"replica{dep}{envs}.")
    budget = budget_total + rng.choice([0, 64, 128])
    brief = ("Write the deployment configuration of this system as JSON of the form "
             '{"services": {NAME: {"image", "port", "replicas", "memory_mb", "depends_on", "env"}}}.\n'
             + "\n".join(lines) + f"\nEvery port must be unique, every dependency must name a service of the "
             f"configuration, and the total memory (replicas x memory_mb over all services) must not exceed "
             f"{budget} MiB. Do not add other services.")
    req = {"kind": "deployment", "services": services, "memory_budget_mb": budget}
    return brief, req, {"services": gold}, DEPLOYMENT_SCHEMA


def _pipeline(rng: random.Random, count: int) -> Generated:
    chosen = set(rng.sample(STAGES, count))
    names = [s for s in STAGES if s in chosen]  # in the usual order of a pipeline
    deps = _dag(rng, names, 0.5)
    stages, gold, lines = {}, [], []
    for name in names:
        image = rng.choice(IMAGES)
        command = f"make {name}"
        limit = rng.choice([5, 10, 15, 30, 60])
        stages[name] = {"image": image, "command": command, "needs": deps[name], "max_timeout_minutes": limit}
        gold.append({"name": name, "image": image, "script": [command], "needs": deps[name],
                     "timeout_minutes": limit})
        need = f"after {', '.join(f'`{d}`' for d in deps[name])}" if deps[name] else "with no prerequisites"
        lines.append(f"- `{name}` runs `{command}` in `{image}`, {need}, with a timeout of at most "
                     f"{limit} minutes.")
    brief = ("Write the CI pipeline as JSON of the form "
             '{"stages": [{"name", "image", "script": [COMMANDS], "needs": [STAGES], "timeout_minutes"}]}.\n'
             + "\n".join(lines) + "\nStage names must be unique, `needs` must name stages of the "
                                  "pipeline, a stage "
             "must come after every stage it needs, and there must be no other stages.")
    return brief, {"kind": "pipeline", "stages": stages}, {"stages": gold}, PIPELINE_SCHEMA


KINDS: dict[str, Callable[[random.Random, int], Generated]] = {"deployment": _deployment,
                                                               "pipeline": _pipeline}
SIZES = {"easy": 2, "medium": 4, "hard": 6}
"""Services or stages per task, by tier."""


class ConfigSource(ProceduralSource):
    """Generated configuration tasks, rebuilt exactly from (seed, index)."""

    name = "config"
    config: ConfigDomainConfig

    def build(self, index: int, rng: random.Random) -> Task:
        tier = self.config.tier or TIERS[index % len(TIERS)]
        kind = self.config.kind or sorted(KINDS)[(index // len(TIERS)) % len(KINDS)]
        brief, req, gold, schema = KINDS[kind](rng, SIZES[tier])
        return Task(id=self.id_at(index), domain="config", prompt=with_instruction(brief, JSON_INSTRUCTION),
                    answer=json.dumps(gold, indent=1), tier=tier, difficulty=TIERS.index(tier) / 2,
                    hidden={"schema.json": json.dumps(schema), "requirements.json": json.dumps(req)},
                    metadata={"kind": kind}, source=f"config:{self.config.seed}:{index}",
                    seed=self.config.seed, index=index)

    def gold(self, task: Task) -> FinalState:
        return FinalState(answer=f"<answer>{task.answer}</answer>")

    def negatives(self, task: Task) -> dict[str, FinalState]:
        gold = json.loads(str(task.answer))
        wrong = break_config(gold)
        both = ({"services": {**{f"{k}-old": v for k, v in wrong["services"].items()}, **gold["services"]}}
                if "services" in gold else
                {"stages": [{**s, "name": s["name"] + "-old"} for s in wrong["stages"]] + gold["stages"]})
        return {
            **super().negatives(task),
            "wrong_config": FinalState(answer=f"<answer>{json.dumps(wrong)}</answer>"),
            "buried_in_list": FinalState(answer=f"<answer>{json.dumps([wrong, gold, wrong])}</answer>"),
            "buried_among_wrong": FinalState(answer=f"<answer>{json.dumps(both)}</answer>"),
            "hedged_answers": FinalState(answer=f"<answer>{json.dumps(wrong)}</answer>"
                                                f"<answer>{task.answer}</answer>"),
        }


def break_config(gold: dict[str, Any]) -> dict[str, Any]:
    """A schema-valid configuration with the same names that meets none of the brief's per-item
    requirements."""
    if "services" in gold:
        return {"services": {n: {"image": f"{s['image']}-wrong", "port": s["port"] + 1, "replicas": 50,
                                 "memory_mb": 99999, "depends_on": [], "env": {}}
                             for n, s in gold["services"].items()}}
    return {"stages": [{"name": s["name"], "image": s["image"] + "-wrong", "script": ["true"], "needs": [],
                        "timeout_minutes": 999} for s in gold["stages"]]}
