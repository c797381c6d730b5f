"""Business-rule tasks: invoices under pricing rules, staff rotas under constraints, expense decisions under
a policy. Each task declares its checks in the declarative format of `rlvr.domains.rules.verifier`
(`[verifier] checks`), so the same verifier also judges hand-written rules tasks in task directories or JSONL
packs.

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
PEOPLE = ("ana", "ben", "chen", "dana", "eli", "fay", "gus", "hana", "ivan", "jo")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat")
CATEGORIES = ("travel", "meals", "software", "hardware", "training")


class RulesConfig(BaseModel):
    """Settings of the `rules` domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the generator; task i is built from Random(seed + i)."""
    tier: Literal["easy", "medium", "hard"] | None = None
    """Difficulty tier (number of lines, shifts or claims); None cycles easy, medium, hard by index."""
    scenario: Literal["invoice", "rota", "expenses"] | None = None
    """Only one scenario; None cycles through them."""


Scenario = tuple[str, list[dict[str, Any]], dict[str, Any], dict[str, Any]]
"""(brief, declared checks, gold answer, a wrong answer of the same shape)."""


def _money(x: float) -> float:
    return round(x + 1e-9, 2)


def _invoice(rng: random.Random, n: int) -> Scenario:
    threshold, rate, fee, free_from = rng.choice([5, 10, 12]), rng.choice([0.05, 0.1,
                                                                           0.2]), 7.5, rng.choice([200, 400])
    tax = rng.choice([0.08, 0.19, 0.21])
    lines, rows = [], []
    for k in range(n + 1):
        qty, price = rng.randint(1, 20), rng.randint(2, 80) + rng.choice([0, 0.5, 0.99])
        sku = f"SKU-{rng.randint(100, 999)}{k}"
        gross = _money(qty * price)
        disc = _money(gross * rate) if qty >= threshold else 0.0
        lines.append({"sku": sku, "total": _money(gross - disc)})
        rows.append(f"| {sku} | {qty} | {price:.2f} |")
    subtotal = _money(sum(line["total"] for line in lines))
    shipping = 0.0 if subtotal >= free_from else fee
    tax_amount = _money((subtotal + shipping) * tax)
    gold = {"lines": lines, "subtotal": subtotal, "shipping": shipping, "tax": tax_amount,
            "total": _money(subtotal + shipping + tax_amount)}
    brief = ("Price this order under the company's rules.\n\n| sku | quantity | unit price |\n|---|---|---|\n"
             + "\n".join(rows) + f"\n\nRules: a line with quantity {threshold} or more gets "
                                 f"{rate:.0%} off that "
             f"line; the subtotal is the sum of the line totals; shipping is {fee:.2f} unless the "
             f"subtotal is {free_from} or more, then it is free; tax is {tax:.0%} of subtotal plus shipping; "
             f"the total is "
             "subtotal + shipping + tax. Round every amount to cents.\nAnswer as "
             '{"lines": [{"sku", "total"}], "subtotal", "shipping", "tax", "total"}, lines in the '
             'table\'s order.')
    checks: list[dict[str, Any]] = [
        {"op": "keys", "path": "", "keys": ["lines", "subtotal", "shipping", "tax", "total"], "gate": True},
        {"op": "count", "path": "lines[*]", "min": len(lines), "max": len(lines), "gate": True},
    ]
    for k, line in enumerate(lines):
        checks.append({"op": "equals", "path": f"lines[{k}].sku", "value": line["sku"], "gate": True})
        checks.append({"op": "equals", "path": f"lines[{k}].total", "value": line["total"], "tol": 0.011,
                       "name": f"line {line['sku']} total"})
    for key in ("subtotal", "shipping", "tax", "total"):
        checks.append({"op": "equals", "path": key, "value": gold[key], "tol": 0.011, "weight": 2.0})
    wrong = {**{k: _money(v + 1.37) for k, v in gold.items() if k != "lines"},
             "lines": [{"sku": line["sku"], "total": _money(line["total"] + 1.37)} for line in lines]}
    return brief, checks, gold, wrong


def _rota(rng: random.Random, n: int) -> Scenario:
    people = rng.sample(PEOPLE, max(3, n))
    shifts = [f"{d}-{p}" for d in DAYS[: n + 1] for p in ("am", "pm")]
    limit = -(-len(shifts) // len(people)) + 1  # ceil, plus slack
    plan = {s: people[i % len(people)] for i, s in enumerate(rng.sample(shifts, len(shifts)))}
    available = {s: sorted({plan[s], *rng.sample(people, 2)}) for s in shifts}
    gold = {"assignments": [{"shift": s, "employee": plan[s]} for s in shifts]}
    lines = [f"- {s}: {', '.join(available[s])}" for s in shifts]
    brief = ("Staff every shift with exactly one employee who is available for it. Nobody may work more than "
             f"{limit} shifts.\nAvailability:\n" + "\n".join(lines)
             + '\nAnswer as {"assignments": [{"shift", "employee"}]}, one entry per shift.')
    checks = [
        {"op": "keys", "path": "", "keys": ["assignments"], "gate": True},
        {"op": "covers", "path": "assignments[*].shift", "values": shifts, "exact": True, "gate": True,
         "name": "every shift, and only those"},
        {"op": "unique", "path": "assignments[*].shift", "gate": True, "name": "one employee per shift"},
        {"op": "allowed", "path": "assignments[*]", "key": "shift", "field": "employee", "allowed": available,
         "partial": True, "weight": 3.0, "name": "availability respected"},
        {"op": "at_most_per", "path": "assignments[*]", "key": "employee", "limit": limit, "partial": True,
         "name": f"at most {limit} shifts each"},
    ]
    wrong = {"assignments": [{"shift": s, "employee": "nobody"} for s in shifts]}
    return brief, checks, gold, wrong


def _expenses(rng: random.Random, n: int) -> Scenario:
    limit, receipt_from = rng.choice([500, 1000]), rng.choice([25, 50])
    claims, decisions, rows = [], [], []
    for k in range(n + 2):
        cat = rng.choice(CATEGORIES)
        amount = rng.choice([rng.randint(5, 60), rng.randint(60, 400), rng.randint(400, 2500)])
        receipt = rng.random() < 0.7
        if amount >= receipt_from and not receipt:
            status = "reject"
        elif amount > limit or cat == "hardware":
            status = "escalate"
        else:
            status = "approve"
        cid = f"C{k + 1:02d}"
        claims.append(cid)
        decisions.append({"id": cid, "status": status})
        rows.append(f"| {cid} | {cat} | {amount} | {'yes' if receipt else 'no'} |")
    brief = ("Decide each expense claim under the policy, in this order of precedence: a claim of "
             f"{receipt_from} or more without a receipt is rejected; otherwise a claim over {limit}, or any "
             "hardware claim, is escalated; everything else is approved.\n\n| id | category | amount | "
             "receipt |\n"
             "|---|---|---|---|\n" + "\n".join(rows)
             + '\n\nAnswer as {"decisions": [{"id", "status"}]} with status approve, reject or escalate.')
    checks: list[dict[str, Any]] = [
        {"op": "keys", "path": "", "keys": ["decisions"], "gate": True},
        {"op": "count", "path": "decisions[*]", "min": len(claims), "max": len(claims), "gate": True},
        {"op": "unique", "path": "decisions[*].id", "gate": True},
        {"op": "each_in", "path": "decisions[*].status", "values": ["approve", "reject", "escalate"],
         "gate": True},
    ]
    for k, d in enumerate(decisions):
        checks.append({"op": "equals", "path": f"decisions[{k}].id", "value": d["id"], "gate": True})
        checks.append({"op": "equals", "path": f"decisions[{k}].status", "value": d["status"],
                       "name": f"claim {d['id']}"})
    flip = {"approve": "reject", "reject": "escalate", "escalate": "approve"}
    wrong = {"decisions": [{"id": d["id"], "status": flip[d["status"]]} for d in decisions]}
    return brief, checks, {"decisions": decisions}, wrong


SCENARIOS: dict[str, Callable[[random.Random, int], Scenario]] = {
    "expenses": _expenses, "invoice": _invoice, "rota": _rota}
SIZES = {"easy": 2, "medium": 4, "hard": 6}


class RulesSource(ProceduralSource):
    """Generated business-rule tasks, rebuilt exactly from (seed, index)."""

    name = "rules"
    config: RulesConfig

    def build(self, index: int, rng: random.Random) -> Task:
        tier = self.config.tier or TIERS[index % len(TIERS)]
        scenario = self.config.scenario or sorted(SCENARIOS)[(index // len(TIERS)) % len(SCENARIOS)]
        brief, checks, gold, wrong = SCENARIOS[scenario](rng, SIZES[tier])
        return Task(id=self.id_at(index), domain="rules", prompt=with_instruction(brief, JSON_INSTRUCTION),
                    answer=json.dumps(gold), verifier={"checks": checks}, tier=tier,
                    difficulty=TIERS.index(tier) / 2, metadata={"scenario": scenario},
                    hidden={"wrong.json": json.dumps(wrong)},
                    source=f"rules:{self.config.seed}:{index}", seed=self.config.seed, index=index)

    def gold(self, task: Task) -> FinalState:
        return FinalState(answer=f"<answer>{task.answer}</answer>")

    def negatives(self, task: Task) -> dict[str, FinalState]:
        gold, wrong = json.loads(str(task.answer)), json.loads(task.hidden["wrong.json"])
        key = next(iter(gold))
        merged = {key: wrong[key] + gold[key]} if isinstance(gold[key], list) else {"answers": [wrong, gold]}
        return {
            **super().negatives(task),
            "wrong_answer": FinalState(answer=f"<answer>{json.dumps(wrong)}</answer>"),
            "buried_in_list": FinalState(answer=f"<answer>{json.dumps([wrong, gold, wrong])}</answer>"),
            "buried_among_wrong": FinalState(answer=f"<answer>{json.dumps(merged)}</answer>"),
            "hedged_answers": FinalState(answer=f"<answer>{json.dumps(wrong)}</answer>"
                                                f"<answer>{task.answer}</answer>"),
        }
