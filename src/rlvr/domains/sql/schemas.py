"""The sql domain's seeded schemas: a shop, a company's staff and a general ledger, each with a generator of
data drawn from a Random, so that a task's visible data and the fresh data of each verification are the same
schema with other rows.

Every dataset holds what the tasks' questions turn on, whatever the draw: customers without orders or without
an email, products never sold, ties, employees without a department or earning more than their manager,
batches that do not balance, bank lines without a matching entry or with another amount.
"""
from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

Row = tuple[object, ...]
Data = dict[str, list[Row]]

FIRST = ("Ada", "Ben", "Chen", "Dana", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Mo", "Nia",
         "Oto", "Pia", "Raj", "Sue", "Tom", "Uma", "Vic", "Wen", "Yan", "Zoe")
LAST = ("Abe", "Berg", "Cruz", "Diaz", "Eng", "Falk", "Gray", "Holm", "Ito", "Jain", "Kim", "Lund", "Moss",
        "Noor", "Ortiz", "Park", "Quinn", "Roy", "Sato", "Toth")
COUNTRIES = ("DE", "FR", "JP", "US", "BR", "IN", "SE")
CATEGORIES = ("books", "games", "garden", "kitchen", "tools")
PRODUCTS = ("lamp", "kettle", "spade", "chess", "atlas", "saw", "mug", "puzzle", "rake", "novel", "drill",
            "whisk", "hose", "cards", "pan")
STATUSES = ("paid", "shipped", "cancelled", "refunded")
DEPARTMENTS = ("Sales", "Research", "Support", "Finance", "Legal", "Ops")


@dataclass(frozen=True)
class Schema:
    """One seeded schema."""

    name: str
    ddl: str
    """CREATE statements (in order)."""
    tables: tuple[str, ...]
    """Tables in load order (parents first)."""
    generate: Callable[[random.Random], Data]
    """Rows per table, drawn from the Random."""


def sql_value(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, Decimal)):
        return str(v)
    if isinstance(v, dt.date):
        return f"'{v.isoformat()}'"
    return "'" + str(v).replace("'", "''") + "'"


def inserts(schema: Schema, data: Data) -> str:
    """The data as INSERT statements, parents first."""
    out = []
    for table in schema.tables:
        rows = data.get(table, [])
        if rows:
            values = ",\n  ".join("(" + ", ".join(sql_value(v) for v in row) + ")" for row in rows)
            out.append(f"INSERT INTO {table} VALUES\n  {values};\n")
    return "".join(out)


def _money(rng: random.Random, lo: int, hi: int) -> Decimal:
    return Decimal(rng.randint(lo * 100, hi * 100)) / 100


def _day(rng: random.Random, year: int = 2025) -> dt.date:
    return dt.date(year, 1, 1) + dt.timedelta(days=rng.randint(0, 364))


def _names(rng: random.Random, n: int) -> list[str]:
    pairs = [f"{f} {s}" for f in FIRST for s in LAST]
    return rng.sample(pairs, n)


SHOP_DDL = """CREATE TABLE customers (
  id integer PRIMARY KEY,
  name text NOT NULL,
  email text,
  country text NOT NULL,
  signup date NOT NULL
);
CREATE TABLE products (
  id integer PRIMARY KEY,
  name text NOT NULL,
  category text NOT NULL,
  price numeric(10,2) NOT NULL
);
CREATE TABLE orders (
  id integer PRIMARY KEY,
  customer_id integer NOT NULL REFERENCES customers(id),
  ordered date NOT NULL,
  status text NOT NULL
);
CREATE TABLE order_items (
  order_id integer NOT NULL REFERENCES orders(id),
  product_id integer NOT NULL REFERENCES products(id),
  qty integer NOT NULL,
  unit_price numeric(10,2) NOT NULL,
  PRIMARY KEY (order_id, product_id)
);
"""


def shop(rng: random.Random) -> Data:
    n_cust = rng.randint(10, 22)
    names = _names(rng, n_cust)
    customers = []
    for i, name in enumerate(names, start=1):
        email = None if i % 4 == 1 or rng.random() < 0.15 else f"{name.split()[0].lower()}{i}@example.com"
        customers.append((i, name, email, rng.choice(COUNTRIES[:5]), _day(rng, 2024)))
    cats = rng.sample(CATEGORIES, 4)
    products = [(i, name, cats[(i - 1) % len(cats)], _money(rng, 3, 90))
                for i, name in enumerate(rng.sample(PRODUCTS, rng.randint(8, 12)), start=1)]
    buyers = [c[0] for c in customers[: max(3, n_cust - rng.randint(2, 4))]]  # the last few never order
    sold = [p for p in products[:-1]]  # the last product is never sold
    orders, items = [], []
    for oid in range(1, rng.randint(18, 40)):
        status = STATUSES[0] if oid <= 2 else rng.choice(STATUSES + ("paid", "shipped"))
        orders.append((oid, rng.choice(buyers), _day(rng), status))
        for p in rng.sample(sold, rng.randint(1, 3)):
            price = p[3] if rng.random() < 0.8 else p[3] - Decimal("1.00")
            items.append((oid, p[0], rng.choice([1, 1, 2, 3, 5]), max(price, Decimal("0.50"))))
    return {"customers": customers, "products": products, "orders": orders, "order_items": items}


HR_DDL = """CREATE TABLE departments (
  id integer PRIMARY KEY,
  name text NOT NULL,
  budget numeric(12,2)
);
CREATE TABLE employees (
  id integer PRIMARY KEY,
  name text NOT NULL,
  dept_id integer REFERENCES departments(id),
  manager_id integer REFERENCES employees(id),
  salary numeric(10,2) NOT NULL,
  hired date NOT NULL
);
"""


def hr(rng: random.Random) -> Data:
    depts = [(i, name, None if i == 2 else _money(rng, 50_000, 400_000))
             for i, name in enumerate(rng.sample(DEPARTMENTS, rng.randint(3, 5)), start=1)]
    n = rng.randint(12, 26)
    names = _names(rng, n)
    staff: list[Row] = []
    for i, name in enumerate(names, start=1):
        dept = None if i in (n, n - 3) else depts[(i - 1) % len(depts)][0]
        manager = None if i <= 2 else rng.randint(1, min(i - 1, 6))
        salary = _money(rng, 2_000, 9_000) if manager else _money(rng, 7_000, 12_000)
        if i == 5:
            salary = Decimal("12500.00")  # earns more than whoever manages them
        if i == 7:
            manager, salary = 2, staff[1][4]  # earns exactly what their manager earns
        staff.append((i, name, dept, manager, salary, _day(rng, rng.choice([2021, 2022, 2023, 2024]))))
    return {"departments": depts, "employees": staff}


LEDGER_DDL = """CREATE TABLE accounts (
  id integer PRIMARY KEY,
  code text NOT NULL UNIQUE,
  name text NOT NULL,
  kind text NOT NULL
);
CREATE TABLE entries (
  id integer PRIMARY KEY,
  batch integer NOT NULL,
  account_id integer NOT NULL REFERENCES accounts(id),
  posted date NOT NULL,
  debit numeric(12,2) NOT NULL DEFAULT 0,
  credit numeric(12,2) NOT NULL DEFAULT 0,
  memo text
);
CREATE TABLE bank_lines (
  id integer PRIMARY KEY,
  posted date NOT NULL,
  amount numeric(12,2) NOT NULL,
  ref text NOT NULL
);
"""
ACCOUNTS = ((1, "1000", "Cash", "asset"), (2, "1200", "Receivables", "asset"), (3, "2000", "Payables",
            "liability"), (4, "4000", "Sales", "income"), (5, "5000", "Rent", "expense"),
            (6, "5100", "Supplies", "expense"))


def ledger(rng: random.Random) -> Data:
    """Two entries per batch (cash and the other side); 1-3 batches get a third line that unbalances them
    (the first one below zero, the others above); batch 1 has no bank line, batch 2's bank line has another
    amount, and one bank line (a fee) has no entry at all."""
    entries: list[Row] = []
    bank: list[Row] = []
    n_batches = rng.randint(8, 16)
    broken = sorted(rng.sample(range(1, n_batches + 1), rng.randint(1, 3)))
    for batch in range(1, n_batches + 1):
        day, amount, ref = _day(rng), _money(rng, 20, 900), f"INV-{batch:03d}"
        income = rng.random() < 0.5
        cash = (amount, Decimal(0)) if income else (Decimal(0), amount)
        other = rng.choice([4, 2]) if income else rng.choice([5, 6, 3])
        entries.append((len(entries) + 1, batch, 1, day, *cash, ref))
        entries.append((len(entries) + 1, batch, other, day, cash[1], cash[0],
                        f"{ref} {rng.choice(['rent', 'sale', 'fee'])}"))
        if batch in broken:
            off = Decimal("-7.25") if batch == broken[0] else Decimal("10.00")
            entries.append((len(entries) + 1, batch, 6, day, max(off, Decimal(0)), max(-off, Decimal(0)),
                            f"{ref} adjustment"))
        roll = rng.random()
        if batch == 1 or (batch > 2 and roll < 0.15):
            continue  # no bank line for this entry
        differs = batch == 2 or roll > 0.85
        bank.append((len(bank) + 1, day, cash[0] - cash[1] + (Decimal("1.50") if differs else 0), ref))
    bank.append((len(bank) + 1, _day(rng), _money(rng, 5, 80), "FEE-" + str(rng.randint(100, 999))))
    return {"accounts": list(ACCOUNTS), "entries": entries, "bank_lines": bank}


SCHEMAS = {s.name: s for s in (
    Schema("shop", SHOP_DDL, ("customers", "products", "orders", "order_items"), shop),
    Schema("hr", HR_DDL, ("departments", "employees"), hr),
    Schema("ledger", LEDGER_DDL, ("accounts", "entries", "bank_lines"), ledger),
)}
"""Every schema by name."""
