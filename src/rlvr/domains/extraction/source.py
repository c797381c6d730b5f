"""Structured extraction from generated financial documents: income statements, balance sheets, invoices.

Documents mix prose and tables and carry distractors: a prior-year column (sometimes first), figures
restated in a note, amounts stated in thousands, a quote number beside the invoice number. The model
answers one JSON object; the authoritative figures (`hidden/truth.json`) are in full currency units.
`hidden/facts.json` says which fields are stated in the document and the numbers it contains, so the
verifier can flag values the document does not support. Task `i` is built from `Random(seed + i)`.
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
COMPANIES = ("Northwind Traders", "Acme Holdings", "Bluebird Analytics", "Keystone Foods", "Orion Freight",
             "Lumen Health", "Vega Textiles", "Harbor Energy", "Quill Media", "Sable Robotics")
CURRENCIES = {"USD": "$", "EUR": "€", "GBP": "£"}


class ExtractionConfig(BaseModel):
    """Settings of the `extraction` domain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the generator; task i is built from Random(seed + i)."""
    tier: Literal["easy", "medium", "hard"] | None = None
    """easy: one period, full units; medium: a prior-year column and units in thousands; hard: also restated
    figures and the prior year first. None cycles easy, medium, hard by index."""
    document: Literal["income_statement", "balance_sheet", "invoice"] | None = None
    """Only one kind of document; None cycles through them."""


Doc = tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]
"""(document text, truth, prior-period values of the same fields, example answer shown in the prompt,
facts)."""


def _fmt(value: float, scale: int) -> str:
    return f"{value / scale:,.0f}" if scale > 1 else f"{value:,.2f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _periods(rng: random.Random, tier: str) -> tuple[int, bool, bool, int]:
    """(fiscal year, show prior year, prior year first, scale)."""
    year = rng.randint(2015, 2025)
    prior = tier != "easy"
    return year, prior, tier == "hard" and rng.random() < 0.6, 1000 if tier != "easy" else 1


def _columns(year: int, prior: bool, prior_first: bool) -> list[int]:
    if not prior:
        return [year]
    return [year - 1, year] if prior_first else [year, year - 1]


def _income(rng: random.Random, tier: str) -> Doc:
    year, prior, prior_first, scale = _periods(rng, tier)
    cur = rng.choice(sorted(CURRENCIES))

    def figures() -> dict[str, float]:
        revenue = rng.randint(2_000, 90_000) * 1000.0
        cost = round(revenue * rng.uniform(0.35, 0.7), -3)
        opex = round(revenue * rng.uniform(0.1, 0.25), -3)
        tax = round((revenue - cost - opex) * 0.2, -3)
        return {"revenue": revenue, "cost_of_revenue": cost, "gross_profit": revenue - cost,
                "operating_expenses": opex, "operating_income": revenue - cost - opex, "income_tax": tax,
                "net_income": revenue - cost - opex - tax}

    now, before = figures(), figures()
    shown = dict(now)
    note = ""
    if tier == "hard":  # the table shows the original operating expenses; a note restates them
        restated = now["operating_expenses"] + rng.choice([-1, 1]) * rng.randint(1, 20) * 1000.0
        note = (f"\n\nNote 7. Operating expenses for fiscal {year} have been restated to "
                f"{_fmt(restated, scale)} (previously reported {_fmt(now['operating_expenses'], scale)}). "
                "Operating income and net income are affected by the same amount; income tax is unchanged.")
        delta = restated - now["operating_expenses"]
        now = {**now, "operating_expenses": restated, "operating_income": now["operating_income"] - delta,
               "net_income": now["net_income"] - delta}
    labels = [("Revenue", "revenue"), ("Cost of revenue", "cost_of_revenue"),
              ("Gross profit", "gross_profit"),
              ("Operating expenses", "operating_expenses"), ("Operating income", "operating_income"),
              ("Income tax", "income_tax"), ("Net income", "net_income")]
    cols = _columns(year, prior, prior_first)
    rows = [[label] + [_fmt((shown if c == year else before)[key], scale) for c in cols] for label,
            key in labels]
    company = rng.choice(COMPANIES)
    unit = f"in thousands of {cur}" if scale > 1 else f"in {cur}"
    text = (f"{company} — consolidated statement of income for the fiscal year {year} ({unit}).\n\n"
            + _table(["", *[f"FY{c}" for c in cols]], rows) + note
            + f"\n\nManagement notes that revenue "
              f"{'grew' if now['revenue'] > before['revenue'] else 'declined'} "
            f"compared with the prior year.")
    fields = ["revenue", "cost_of_revenue", "gross_profit", "operating_expenses", "operating_income",
              "net_income"]
    truth = {"company": company, "fiscal_year": year, "currency": cur, **{f: now[f] for f in fields}}
    wrong = {"company": company, "fiscal_year": year - 1, "currency": cur, **{f: before[f] for f in fields}}
    return text, truth, wrong, _example(truth), {"rules": ["gross_profit", "operating_income"],
                                                 "scale": scale}


def _balance(rng: random.Random, tier: str) -> Doc:
    year, prior, prior_first, scale = _periods(rng, tier)
    cur = rng.choice(sorted(CURRENCIES))

    def figures() -> dict[str, float]:
        parts = {k: rng.randint(100, 40_000) * 1000.0 for k in ("cash", "receivables", "inventory", "ppe")}
        assets = sum(parts.values())
        payables, debt = round(assets * rng.uniform(0.1, 0.3), -3), round(assets * rng.uniform(0.1, 0.4), -3)
        return {**parts, "total_assets": assets, "accounts_payable": payables, "long_term_debt": debt,
                "total_liabilities": payables + debt, "total_equity": assets - payables - debt}

    now, before = figures(), figures()
    labels = [("Cash and equivalents", "cash"), ("Accounts receivable", "receivables"),
              ("Inventory", "inventory"),
              ("Property, plant and equipment", "ppe"), ("Total assets", "total_assets"),
              ("Accounts payable", "accounts_payable"), ("Long-term debt", "long_term_debt"),
              ("Total liabilities", "total_liabilities"), ("Total shareholders' equity", "total_equity")]
    cols = _columns(year, prior, prior_first)
    rows = [[label] + [_fmt((now if c == year else before)[key], scale) for c in cols] for label,
            key in labels]
    company = rng.choice(COMPANIES)
    unit = f"in thousands of {cur}" if scale > 1 else f"in {cur}"
    text = (f"{company} — balance sheet as of 31 December {year} ({unit}).\n\n"
            + _table(["", *[f"31 Dec {c}" for c in cols]], rows)
            + f"\n\nCash at the end of {year} stood at {CURRENCIES[cur]}{_fmt(now['cash'], scale)}"
            + (" thousand." if scale > 1 else "."))
    fields = ["cash", "total_assets", "total_liabilities", "total_equity"]
    truth = {"company": company, "fiscal_year": year, "currency": cur, **{f: now[f] for f in fields}}
    wrong = {"company": company, "fiscal_year": year - 1, "currency": cur, **{f: before[f] for f in fields}}
    return text, truth, wrong, _example(truth), {"rules": ["balance"], "scale": scale}


def _invoice(rng: random.Random, tier: str) -> Doc:
    cur = rng.choice(sorted(CURRENCIES))
    number = f"INV-{rng.randint(10000, 99999)}"
    quote = f"Q-{number[4:]}" if tier != "easy" else None
    lines = [(rng.choice(["Consulting", "Licence", "Support", "Hosting", "Training", "Hardware"]),
              rng.randint(1, 12), rng.randint(20, 900) + rng.choice([0, 0.5, 0.25]))
              for _ in range(rng.randint(2, 5))]
    subtotal = round(sum(q * p for _, q, p in lines), 2)
    rate = rng.choice([0.07, 0.1, 0.2])
    tax = round(subtotal * rate, 2)
    previous = round(rng.uniform(50, 5000), 2)
    rows = [[d, str(q), f"{p:,.2f}", f"{q * p:,.2f}"] for d, q, p in lines]
    text = (f"INVOICE {number}" + (f" (re: quotation {quote})" if quote else "") + f"\nCurrency: {cur}\n\n"
            + _table(["Item", "Qty", "Unit price", "Amount"], rows)
            + f"\n\nSubtotal: {subtotal:,.2f}\nTax ({rate:.0%}): {tax:,.2f}\nTotal due: {subtotal + tax:,.2f}"
            + (f"\n\nYour previous balance of {previous:,.2f} was settled on the last invoice and is not "
               "included above." if tier != "easy" else ""))
    truth = {"invoice_number": number, "currency": cur, "subtotal": subtotal, "tax": tax,
             "total": round(subtotal + tax, 2)}
    wrong = {"invoice_number": quote or f"INV-{int(number[4:]) + 1}", "currency": cur, "subtotal": previous,
             "tax": round(previous * rate, 2), "total": round(previous * (1 + rate), 2)}
    return text, truth, wrong, _example(truth), {"rules": ["invoice_total"], "scale": 1}


def _example(truth: dict[str, Any]) -> dict[str, Any]:
    """The example answer shown in the prompt: the right shape with made-up values."""
    fake = {"company": "Example Corp", "fiscal_year": 1999, "currency": "XXX", "invoice_number": "INV-00000"}
    return {k: fake.get(k, 12345.0 + 1000 * i) for i, k in enumerate(truth)}


DOCUMENTS: dict[str, Callable[[random.Random, str], Doc]] = {
    "balance_sheet": _balance, "income_statement": _income, "invoice": _invoice}


def _numbers(text: str) -> list[float]:
    import re

    return [float(m.replace(",", "")) for m in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


class ExtractionSource(ProceduralSource):
    """Generated financial documents, rebuilt exactly from (seed, index)."""

    name = "extraction"
    config: ExtractionConfig

    def build(self, index: int, rng: random.Random) -> Task:
        tier = self.config.tier or TIERS[index % len(TIERS)]
        kind = self.config.document or sorted(DOCUMENTS)[(index // len(TIERS)) % len(DOCUMENTS)]
        text, truth, wrong, example, facts = DOCUMENTS[kind](rng, tier)
        year_note = f" for fiscal year {truth['fiscal_year']}" if "fiscal_year" in truth else ""
        prompt = (f"Extract the figures{year_note} from this document.\n\n---\n{text}\n---\n\n"
                  f"Report money in full {truth['currency']} units (not thousands), as numbers. Use "
                  f"exactly these keys, as in this example with made-up values:\n{json.dumps(example)}")
        facts = {**facts, "numbers": sorted(set(_numbers(text))), "example": example}
        return Task(id=self.id_at(index), domain="extraction",
                    prompt=with_instruction(prompt, JSON_INSTRUCTION),
                    answer=json.dumps(truth), tier=tier, difficulty=TIERS.index(tier) / 2,
                    hidden={"truth.json": json.dumps(truth), "facts.json": json.dumps(facts),
                            "wrong.json": json.dumps(wrong)},
                    metadata={"document": kind}, source=f"extraction:{self.config.seed}:{index}",
                    seed=self.config.seed, index=index)

    def gold(self, task: Task) -> FinalState:
        return FinalState(answer=f"<think>Reading the document.</think><answer>{task.answer}</answer>")

    def negatives(self, task: Task) -> dict[str, FinalState]:
        truth, wrong = json.loads(str(task.answer)), json.loads(task.hidden["wrong.json"])
        facts = json.loads(task.hidden["facts.json"])
        thousands = {k: v / 1000 if isinstance(v, float) else v for k, v in truth.items()}
        buried = {k: [wrong[k], v, wrong[k]] if isinstance(v, float) else v for k, v in truth.items()}
        controls = {
            **super().negatives(task),
            "wrong_period": FinalState(answer=f"<answer>{json.dumps(wrong)}</answer>"),
            "copied_example": FinalState(answer=f"<answer>{json.dumps(facts['example'])}</answer>"),
            "buried_among_wrong": FinalState(answer=f"<answer>{json.dumps(buried)}</answer>"),
            "hedged_answers": FinalState(answer=f"<answer>{json.dumps(wrong)}</answer>"
                                                f"<answer>{task.answer}</answer>"),
        }
        if any(isinstance(v, float) and v >= 1000 for v in truth.values()):
            controls["units_in_thousands"] = FinalState(answer=f"<answer>{json.dumps(thousands)}</answer>")
        return controls
