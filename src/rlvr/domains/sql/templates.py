"""The sql domain's task templates: business questions answered by one query, and migrations that change a
schema while keeping its data and enforcing its constraints, each with the reference SQL, a plausible wrong
answer (a negative control: the reference with one mistake edited in) and, for a migration, what is
inspected afterwards.

A query's result is compared row by row (every question fixes its columns and a total order). A migration is
judged by the columns of the tables it touches, the rows the inspection queries return, and how each probe
(statements that must fail, or succeed and return something) behaves, all compared with the reference
migration's on the same data. Texts and SQL are format strings over the template's parameters.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rlvr.domains.sql.schemas import Data

Params = dict[str, Any]


@dataclass(frozen=True)
class Template:
    """One kind of task."""

    name: str
    tier: str
    schema: str
    kind: str
    """`query` or `migration`."""
    question: str
    """The question (query) or the change (migration), for the prompt (a format string over the params)."""
    sql: str
    """The reference (a format string over the params)."""
    mistake: tuple[tuple[str, str], ...]
    """The wrong answer: these (old, new) edits of the reference."""
    draw: Callable[[random.Random], Params] | None = None
    """The parameters, drawn from the task's Random (None: none)."""
    tables: tuple[str, ...] = ()
    """A migration's tables whose columns are compared."""
    inspect: tuple[str, ...] = ()
    """A migration's inspection queries."""
    probes: tuple[str, ...] = ()
    """A migration's probes (each run alone, then rolled back)."""
    prepare: Callable[[Data, random.Random], Data] | None = None
    """What a migration needs in every dataset beside the schema's own rows (rows it must repair)."""

    def params(self, rng: random.Random) -> Params:
        return self.draw(rng) if self.draw else {}

    def text(self, p: Params) -> str:
        return self.question.format(**p)

    def reference(self, p: Params) -> str:
        return self.sql.format(**p)

    def wrong(self, p: Params) -> str:
        text = self.reference(p)
        for old, new in self.mistake:
            if old not in text:
                raise ValueError(f"template {self.name!r}: the reference has no {old!r} to edit")
            text = text.replace(old, new)
        return text


def _months(rng: random.Random) -> Params:
    start = rng.randint(1, 6)
    end = rng.randint(start + 3, 12)
    return {"start": f"2025-{start:02d}-01", "end": f"2025-{end:02d}-28"}


PAID = "o.status IN ('paid', 'shipped')"
QUERIES: tuple[Template, ...] = (
    Template(
        "revenue_by_country", "easy", "shop", "query", draw=_months,
        question="What revenue did each country bring in from orders placed from {start} to {end} (both "
                 "included) whose status is paid or shipped? Revenue is the sum of qty * unit_price of their "
                 "items. Columns: country, revenue (rounded to 2 decimals). Rows: by revenue, highest first, "
                 "then by country. Leave out countries without such revenue.",
        sql="SELECT c.country, ROUND(SUM(i.qty * i.unit_price), 2) AS revenue\n"
            "FROM orders o\nJOIN customers c ON c.id = o.customer_id\nJOIN order_items i ON i.order_id = "
            "o.id\n"
            f"WHERE {PAID} AND o.ordered BETWEEN DATE '{{start}}' AND DATE '{{end}}'\n"
            "GROUP BY c.country\nORDER BY revenue DESC, c.country;\n",
        mistake=((f"WHERE {PAID} AND ", "WHERE "),)),
    Template(
        "email_coverage", "easy", "shop", "query",
        question="For each country, how many customers are there and how many of them have no email address? "
                 "Columns: country, customers, without_email. Rows: by country.",
        sql="SELECT country, COUNT(*) AS customers, COUNT(*) - COUNT(email) AS without_email\n"
            "FROM customers\nGROUP BY country\nORDER BY country;\n",
        mistake=(("COUNT(*) - COUNT(email)", "COUNT(*) FILTER (WHERE email = NULL)"),)),
    Template(
        "hired_in_year", "easy", "hr", "query",
        draw=lambda rng: {"year": rng.choice([2021, 2022, 2023, 2024]),
                          "floor": rng.choice([3000, 4500, 6000])},
        question="Which employees hired in {year} earn at least {floor}? Columns: id, name, salary. Rows: by "
                 "salary, highest first, then by id.",
        sql="SELECT id, name, salary\nFROM employees\nWHERE salary >= {floor}\n"
            "  AND date_part('year', hired) = {year}\nORDER BY salary DESC, id;\n",
        mistake=(("\n  AND date_part('year', hired) = ", "\n  AND 0 <> "),)),
    Template(
        "totals_by_kind", "easy", "ledger", "query",
        question="What are the total debit and the total credit of the entries of each kind of account? "
                 "Columns: kind, debit, credit. Rows: by kind. Leave out kinds without entries.",
        sql="SELECT a.kind, SUM(e.debit) AS debit, SUM(e.credit) AS credit\nFROM entries e\n"
            "JOIN accounts a ON a.id = e.account_id\nGROUP BY a.kind\nORDER BY a.kind;\n",
        mistake=(("GROUP BY a.kind\n", "GROUP BY a.kind, a.name\n"),)),
    Template(
        "no_paid_orders", "medium", "shop", "query",
        question="Which customers have no order that is paid or shipped (customers without any order count "
                 "too)? Columns: id, name. Rows: by id.",
        sql="SELECT c.id, c.name\nFROM customers c\nWHERE NOT EXISTS (\n"
            f"  SELECT 1 FROM orders o WHERE o.customer_id = c.id AND {PAID})\nORDER BY c.id;\n",
        mistake=(("NOT EXISTS", "EXISTS"), (PAID, "o.status NOT IN ('paid', 'shipped')"))),
    Template(
        "top_product_per_category", "medium", "shop", "query",
        question="For each category, which product sold the most units over all orders that were not "
                 "cancelled (ties: the product with the smallest id)? Columns: category, product (its name), "
                 "units. Rows: by category. Leave out categories with no such sales.",
        sql="SELECT category, product, units FROM (\n"
            "  SELECT p.category, p.name AS product, SUM(i.qty) AS units,\n"
            "         ROW_NUMBER() OVER (PARTITION BY p.category ORDER BY SUM(i.qty) DESC, p.id) AS rn\n"
            "  FROM order_items i\n  JOIN orders o ON o.id = i.order_id\n"
            "  JOIN products p ON p.id = i.product_id\n  WHERE o.status <> 'cancelled'\n"
            "  GROUP BY p.category, p.id, p.name) t\nWHERE rn = 1\nORDER BY category;\n",
        mistake=(("SUM(i.qty)", "MAX(i.qty)"),)),
    Template(
        "salary_by_department", "medium", "hr", "query",
        question="How many employees does each department have and what is their average salary? Employees "
                 "without a department form the department '(none)'. Columns: department, employees, "
                 "avg_salary (rounded to 2 decimals). Rows: by department.",
        sql="SELECT COALESCE(d.name, '(none)') AS department, COUNT(*) AS employees,\n"
            "       ROUND(AVG(e.salary), 2) AS avg_salary\nFROM employees e\n"
            "LEFT JOIN departments d ON d.id = e.dept_id\nGROUP BY COALESCE(d.name, '(none)')\n"
            "ORDER BY department;\n",
        mistake=(("LEFT JOIN", "JOIN"),)),
    Template(
        "monthly_revenue_change", "medium", "shop", "query",
        question="What was the revenue (qty * unit_price over the items of paid or shipped orders) of each "
                 "month that had any, and how did it change from the month listed before it? Columns: month "
                 "(text 'YYYY-MM'), revenue (rounded to 2 decimals), change (revenue minus the previous "
                 "row's "
                 "revenue; NULL on the first row). Rows: by month.",
        sql="SELECT month, revenue, revenue - LAG(revenue) OVER (ORDER BY month) AS change\nFROM (\n"
            "  SELECT to_char(o.ordered, 'YYYY-MM') AS month,\n"
            "         ROUND(SUM(i.qty * i.unit_price), 2) AS revenue\n"
            f"  FROM orders o\n  JOIN order_items i ON i.order_id = o.id\n  WHERE {PAID}\n  GROUP BY 1) m\n"
            "ORDER BY month;\n",
        mistake=(("LAG(", "LEAD("),)),
    Template(
        "paid_above_manager", "hard", "hr", "query",
        question="Which employees earn more than their manager (a rule violation to review)? Columns: "
                 "employee (name), manager (name), salary, manager_salary. Rows: by the employee's id.",
        sql="SELECT e.name AS employee, m.name AS manager, e.salary, m.salary AS manager_salary\n"
            "FROM employees e\nJOIN employees m ON m.id = e.manager_id\nWHERE e.salary > m.salary\n"
            "ORDER BY e.id;\n",
        mistake=(("e.salary > m.salary", "e.salary >= m.salary"),)),
    Template(
        "unbalanced_batches", "hard", "ledger", "query",
        question="Which posting batches do not balance (their debits and credits differ)? Columns: batch, "
                 "debit (total), credit (total), difference (debit minus credit). Rows: by batch.",
        sql="SELECT batch, SUM(debit) AS debit, SUM(credit) AS credit,\n"
            "       SUM(debit) - SUM(credit) AS difference\nFROM entries\nGROUP BY batch\n"
            "HAVING SUM(debit) <> SUM(credit)\nORDER BY batch;\n",
        mistake=(("HAVING SUM(debit) <> SUM(credit)", "HAVING SUM(debit) > SUM(credit)"),)),
    Template(
        "bank_reconciliation", "hard", "ledger", "query",
        question="Reconcile the bank statement with the cash account (code '1000'). A bank line matches when "
                 "a cash entry has the line's ref as its memo and debit minus credit equal to the line's "
                 "amount. List every bank line that does not match. Columns: bank_id, ref, amount, issue "
                 "('no "
                 "entry' when no cash entry has that memo, else 'amount differs'). Rows: by bank_id.",
        sql="SELECT b.id AS bank_id, b.ref, b.amount,\n"
            "       CASE WHEN e.id IS NULL THEN 'no entry' ELSE 'amount differs' END AS issue\n"
            "FROM bank_lines b\nLEFT JOIN entries e\n"
            "  ON e.memo = b.ref AND e.account_id = (SELECT id FROM accounts WHERE code = '1000')\n"
            "WHERE e.id IS NULL OR e.debit - e.credit <> b.amount\nORDER BY b.id;\n",
        mistake=(("LEFT JOIN", "JOIN"),)),
    Template(
        "top_earners_per_department", "hard", "hr", "query",
        draw=lambda rng: {"n": rng.choice([1, 2, 3])},
        question="Who are the {n} best paid employees of each department, counting equal salaries as one "
                 "place (so more than {n} may share the places)? Leave out employees without a department. "
                 "Columns: department (name), employee (name), salary, place (1 for the best paid). Rows: by "
                 "department, place, then employee.",
        sql="SELECT department, employee, salary, place FROM (\n"
            "  SELECT d.name AS department, e.name AS employee, e.salary,\n"
            "         DENSE_RANK() OVER (PARTITION BY d.id ORDER BY e.salary DESC) AS place\n"
            "  FROM employees e\n  JOIN departments d ON d.id = e.dept_id) t\n"
            "WHERE place <= {n}\nORDER BY department, place, employee;\n",
        mistake=(("PARTITION BY d.id ORDER BY", "ORDER BY"),)),
    Template(
        "running_total", "hard", "shop", "query",
        question="For each customer's paid or shipped orders, what is the order's amount (qty * unit_price "
                 "over its items) and the customer's running total up to and including it, in date order "
                 "(ties by order id)? Columns: customer_id, order_id, ordered, amount, running_total. Rows: "
                 "by "
                 "customer_id, ordered, order_id.",
        sql="SELECT customer_id, order_id, ordered, amount,\n"
            "       SUM(amount) OVER (PARTITION BY customer_id ORDER BY ordered, order_id) AS running_total\n"
            "FROM (\n  SELECT o.customer_id, o.id AS order_id, o.ordered,\n"
            "         SUM(i.qty * i.unit_price) AS amount\n"
            f"  FROM orders o\n  JOIN order_items i ON i.order_id = o.id\n  WHERE {PAID}\n"
            "  GROUP BY o.id) t\nORDER BY customer_id, ordered, order_id;\n",
        mistake=((" ORDER BY ordered, order_id) AS running_total", ") AS running_total"),)),
)


def _bad_quantities(data: Data, rng: random.Random) -> Data:
    """Order lines with a zero or negative qty, for the migration to delete."""
    items = list(data["order_items"])
    used = {(r[0], r[1]) for r in items}
    for qty in (0, -1, rng.choice([0, -2])):
        order, product = rng.choice(data["orders"])[0], rng.choice(data["products"])[0]
        if (order, product) not in used:
            used.add((order, product))
            items.append((order, product, qty, Decimal("9.99")))
    return {**data, "order_items": items}


def _zero_entries(data: Data, rng: random.Random) -> Data:
    """Entries with neither debit nor credit, for the migration to delete."""
    rows = list(data["entries"])
    for _ in range(rng.randint(1, 3)):
        at = rng.choice(rows)
        rows.append((len(rows) + 1, at[1], rng.choice([5, 6]), at[3], Decimal(0), Decimal(0), "void"))
    return {**data, "entries": rows}


DAY = "DATE '2025-01-01'"
MIGRATIONS: tuple[Template, ...] = (
    Template(
        "split_customer_name", "medium", "shop", "migration",
        question="Replace customers.name by two columns, first_name and last_name (both text NOT NULL): the "
                 "first name is what comes before the first space of the name, the last name what comes "
                 "after "
                 "it. Drop the name column.",
        sql="ALTER TABLE customers ADD COLUMN first_name text, ADD COLUMN last_name text;\n"
            "UPDATE customers SET first_name = split_part(name, ' ', 1),\n"
            "                     last_name = substr(name, strpos(name, ' ') + 1);\n"
            "ALTER TABLE customers ALTER COLUMN first_name SET NOT NULL,\n"
            "                      ALTER COLUMN last_name SET NOT NULL,\n"
            "                      DROP COLUMN name;\n",
        mistake=((",\n                      DROP COLUMN name;", ";"),),
        tables=("customers",),
        inspect=("SELECT id, first_name, last_name, email, country, signup FROM customers ORDER BY id",),
        probes=("INSERT INTO customers (id, first_name, last_name, country, signup) "
                f"VALUES (9001, 'Ann', NULL, 'DE', {DAY})",
                "INSERT INTO customers (id, first_name, last_name, country, signup) "
                f"VALUES (9002, 'Ann', 'Lee', 'DE', {DAY}) RETURNING id")),
    Template(
        "require_unique_email", "medium", "shop", "migration",
        question="Make customers.email required and unique: a customer without an email gets the address "
                 "'unknown-<id>@example.invalid' (its id in place of <id>); from then on no customer may "
                 "lack "
                 "an email, and no two may share one.",
        sql="UPDATE customers SET email = 'unknown-' || id || '@example.invalid' WHERE email IS NULL;\n"
            "ALTER TABLE customers ALTER COLUMN email SET NOT NULL,\n"
            "                      ADD CONSTRAINT customers_email_key UNIQUE (email);\n",
        mistake=((",\n                      ADD CONSTRAINT customers_email_key UNIQUE (email);", ";"),),
        tables=("customers",), inspect=("SELECT id, name, email, country FROM customers ORDER BY id",),
        probes=(f"INSERT INTO customers (id, name, email, country, signup) VALUES (9001, 'Ann Lee', NULL, "
                f"'DE', {DAY})",
                f"INSERT INTO customers SELECT 9002, 'Ann Lee', email, 'DE', {DAY} FROM customers WHERE id = "
                "2",
                f"INSERT INTO customers (id, name, email, country, signup) VALUES (9003, 'Ann Lee', "
                f"'ann@example.org', 'DE', {DAY}) RETURNING email")),
    Template(
        "budget_not_null", "medium", "hr", "migration",
        question="departments.budget may no longer be empty: departments without a budget get 0, a new "
                 "department gets 0 unless it is given a budget, and no budget may be negative.",
        sql="UPDATE departments SET budget = 0 WHERE budget IS NULL;\n"
            "ALTER TABLE departments ALTER COLUMN budget SET DEFAULT 0,\n"
            "                        ALTER COLUMN budget SET NOT NULL,\n"
            "                        ADD CONSTRAINT departments_budget_check CHECK (budget >= 0);\n",
        mistake=((",\n                        ADD CONSTRAINT departments_budget_check CHECK (budget >= 0);",
                  ";"),),
        tables=("departments",), inspect=("SELECT id, name, budget FROM departments ORDER BY id",),
        probes=("INSERT INTO departments (id, name) VALUES (901, 'New') RETURNING budget",
                "INSERT INTO departments (id, name, budget) VALUES (902, 'Debt', -1)",
                "INSERT INTO departments (id, name, budget) VALUES (903, 'Void', NULL)")),
    Template(
        "positive_quantities", "hard", "shop", "migration", prepare=_bad_quantities,
        question="Order lines must have a positive quantity from now on: delete the order_items whose qty is "
                 "zero or negative, keep every other row as it is, and make the database refuse a qty that "
                 "is "
                 "not positive.",
        sql="DELETE FROM order_items WHERE qty <= 0;\n"
            "ALTER TABLE order_items ADD CONSTRAINT order_items_qty_check CHECK (qty > 0);\n",
        mistake=(("DELETE FROM order_items WHERE qty <= 0;\n", ""), ("(qty > 0);", "(qty > 0) NOT VALID;")),
        tables=("order_items",),
        inspect=("SELECT order_id, product_id, qty, unit_price FROM order_items ORDER BY order_id, "
                 "product_id",),
        probes=tuple(f"INSERT INTO order_items SELECT o.id, p.id, {qty}, 1.00 FROM orders o, products p "
                     "WHERE (o.id, p.id) NOT IN (SELECT order_id, product_id FROM order_items) LIMIT 1"
                     + (" RETURNING qty" if qty > 0 else "") for qty in (0, 2))),
    Template(
        "countries_table", "hard", "shop", "migration",
        question="Move the countries into a table of their own: create countries (code text PRIMARY KEY) "
                 "holding every country code the customers use, and make customers.country (keep its name "
                 "and values) a foreign key to countries.code.",
        sql="CREATE TABLE countries (code text PRIMARY KEY);\n"
            "INSERT INTO countries SELECT DISTINCT country FROM customers;\n"
            "ALTER TABLE customers ADD CONSTRAINT customers_country_fkey\n"
            "  FOREIGN KEY (country) REFERENCES countries (code);\n",
        mistake=(("ALTER TABLE customers ADD CONSTRAINT customers_country_fkey\n"
                  "  FOREIGN KEY (country) REFERENCES countries (code);\n", ""),),
        tables=("countries", "customers"),
        inspect=("SELECT code FROM countries ORDER BY code", "SELECT id, name, country FROM customers ORDER "
                                                             "BY id"),
        probes=(f"INSERT INTO customers (id, name, country, signup) VALUES (9001, 'Ann Lee', 'ZZ', {DAY})",
                "INSERT INTO countries (code) VALUES ('ZZ'); INSERT INTO customers (id, name, country, "
                "signup) "
                f"VALUES (9002, 'Ann Lee', 'ZZ', {DAY}) RETURNING country")),
    Template(
        "signed_amounts", "hard", "ledger", "migration", prepare=_zero_entries,
        question="Replace entries.debit and entries.credit by one column, amount numeric(12,2) NOT NULL, "
                 "holding debit minus credit. Delete the entries whose amount would be zero, and make the "
                 "database refuse a zero amount from then on.",
        sql="ALTER TABLE entries ADD COLUMN amount numeric(12,2);\n"
            "UPDATE entries SET amount = debit - credit;\nDELETE FROM entries WHERE amount = 0;\n"
            "ALTER TABLE entries ALTER COLUMN amount SET NOT NULL,\n"
            "                    ADD CONSTRAINT entries_amount_nonzero CHECK (amount <> 0),\n"
            "                    DROP COLUMN debit,\n                    DROP COLUMN credit;\n",
        mistake=(("amount = debit - credit", "amount = credit - debit"),),
        tables=("entries",),
        inspect=("SELECT id, batch, account_id, posted, amount, memo FROM entries ORDER BY id",),
        probes=tuple("INSERT INTO entries (id, batch, account_id, posted, amount) "
                     f"VALUES ({9001 + k}, 1, 1, {DAY}, {v})" + (" RETURNING amount" if v == "-4.5" else "")
                     for k, v in enumerate(("0", "NULL", "-4.5")))),
)

TEMPLATES = {t.name: t for t in (*QUERIES, *MIGRATIONS)}
"""Every template by name."""
