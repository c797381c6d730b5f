"""Kind `config`: a JSON configuration checked against the task's JSON Schema and compiled semantic rules.

Structural rules are gates: an answer that is not one JSON object, fails the schema, reuses a port or a name,
names a dependency that does not exist, has a dependency cycle or adds items the brief did not ask for scores
0 (a configuration that cannot be deployed is worth nothing, and extra items are how a right answer would be
buried among wrong ones). Past the gates, credit is per rule: one check per service or stage as the brief
specified it, plus global limits (the memory budget).
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.extract import parse_json_answer
from rlvr.verify.verdict import Check, Verdict

"""Longer answers are refused without parsing."""

Doc = dict[str, Any]
Rule = Callable[[Doc, Doc], list[Check]]


def _cycle(edges: dict[str, list[str]]) -> list[str]:
    """A dependency cycle (names), or [] when the graph is acyclic."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = 1
        stack.append(n)
        for m in edges.get(n, []):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m in edges and state.get(m) is None:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for n in edges:
        if state.get(n) is None:
            found = visit(n)
            if found:
                return found
    return []


def _gate(name: str, problems: list[str]) -> Check:
    return Check(name=f"gate:{name}", score=float(not problems), passed=not problems, weight=0.0,
                 detail="; ".join(problems[:5]) or "ok")


def _deployment_gates(doc: Doc, req: Doc) -> list[Check]:
    services = doc["services"]
    ports: dict[int, str] = {}
    dup = []
    for name, s in services.items():
        if s["port"] in ports:
            dup.append(f"port {s['port']} used by {ports[s['port']]!r} and {name!r}")
        ports.setdefault(s["port"], name)
    dangling = [f"{n!r} depends on unknown {d!r}" for n,
                s in services.items() for d in s.get("depends_on", [])
                if d not in services]
    cycle = _cycle({n: list(s.get("depends_on", [])) for n, s in services.items()})
    extra = sorted(set(services) - set(req["services"]))
    return [_gate("unique_ports", dup), _gate("references_resolve", dangling),
            _gate("acyclic", [" -> ".join(cycle)] if cycle else []),
            _gate("only_requested_services", [f"unrequested service {e!r}" for e in extra])]


def _deployment_rules(doc: Doc, req: Doc) -> list[Check]:
    services = doc["services"]
    checks = []
    for name, want in req["services"].items():
        got = services.get(name)
        wrong = ["missing"] if got is None else [
            what for what, ok in (
                ("image", got["image"] == want["image"]), ("port", got["port"] == want["port"]),
                ("replicas", want["replicas"][0] <= got["replicas"] <= want["replicas"][1]),
                ("memory_mb", want["memory_mb"][0] <= got["memory_mb"] <= want["memory_mb"][1]),
                ("depends_on", sorted(got.get("depends_on", [])) == sorted(want["depends_on"])),
                ("env", all(got.get("env", {}).get(k) == v for k, v in want["env"].items())),
            ) if not ok]
        checks.append(Check(name=f"service:{name}", score=float(not wrong), passed=not wrong,
                            detail="as specified" if not wrong else "wrong " + ", ".join(wrong)))
    total = sum(s["replicas"] * s["memory_mb"] for s in services.values())
    ok = total <= req["memory_budget_mb"]
    checks.append(Check(name="limit:memory_budget", score=float(ok), passed=ok,
                        detail=f"{total} MiB of {req['memory_budget_mb']} MiB"))
    return checks


def _pipeline_gates(doc: Doc, req: Doc) -> list[Check]:
    names = [s["name"] for s in doc["stages"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    dangling = [f"{s['name']!r} needs unknown {d!r}" for s in doc["stages"] for d in s.get("needs", [])
                if d not in names]
    cycle = _cycle({s["name"]: list(s.get("needs", [])) for s in doc["stages"]})
    extra = sorted(set(names) - set(req["stages"]))
    return [_gate("unique_names", [f"stage {d!r} defined twice" for d in dup]),
            _gate("references_resolve", dangling), _gate("acyclic", [" -> ".join(cycle)] if cycle else []),
            _gate("only_requested_stages", [f"unrequested stage {e!r}" for e in extra])]


def _pipeline_rules(doc: Doc, req: Doc) -> list[Check]:
    position = {s["name"]: i for i, s in enumerate(doc["stages"])}
    by_name = {s["name"]: s for s in doc["stages"]}
    checks = []
    for name, want in req["stages"].items():
        got = by_name.get(name)
        wrong = ["missing"] if got is None else [
            what for what, ok in (
                ("image", got["image"] == want["image"]), ("script", want["command"] in got["script"]),
                ("needs", sorted(got.get("needs", [])) == sorted(want["needs"])),
                ("timeout", got.get("timeout_minutes", 10**9) <= want["max_timeout_minutes"]),
                ("order", all(position.get(d, 10**9) < position[name] for d in want["needs"])),
            ) if not ok]
        checks.append(Check(name=f"stage:{name}", score=float(not wrong), passed=not wrong,
                            detail="as specified" if not wrong else "wrong " + ", ".join(wrong)))
    return checks


KINDS: dict[str, tuple[Rule, Rule]] = {"deployment": (_deployment_gates, _deployment_rules),
                                       "pipeline": (_pipeline_gates, _pipeline_rules)}
"""Configuration kind -> (gates, credited rules)."""


def _zero(checks: list[Check], details: dict[str, Any]) -> Verdict:
    return Verdict(score=0.0, passed=False, checks=checks, details=details)


@functools.lru_cache(maxsize=256)
def schema_validator(schema_json: str) -> Any:
    """A checked, compiled validator of a task's JSON Schema (tasks of a kind share one schema)."""
    import jsonschema

    schema = json.loads(schema_json)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


class ConfigVerifier:
    """Schema plus compiled semantic rules, credit per rule past the structural gates."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        import jsonschema

        try:
            validator = schema_validator(task.hidden["schema.json"])
            req = json.loads(task.hidden["requirements.json"])
            gates, rules = KINDS[req["kind"]]
        except (KeyError, json.JSONDecodeError, jsonschema.SchemaError) as exc:
            return Verdict.infra(f"config task {task.key} has broken verification material: {exc!s:.200}")
        doc, why = parse_json_answer(final.answer)
        if why:
            return _zero([_gate("json", [why])], {"problem": why})
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
            return _zero([_gate("json", []), _gate("schema", [f"{where}: {errors[0].message[:200]}"])],
                         {"schema_errors": len(errors)})
        gate_checks = [_gate("json", []), _gate("schema", [])] + gates(doc, req)
        if not all(c.passed for c in gate_checks):
            return _zero(gate_checks, {})
        rule_checks = rules(doc, req)
        return Verdict.from_checks(gate_checks + rule_checks)
