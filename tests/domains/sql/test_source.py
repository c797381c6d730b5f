"""The sql domain without a server: tasks by (seed, index), settings refused in one line, the datasets holding
what every question turns on, the templates' wrong answers, and the verifier's comparison and flags over a
judge's report."""
from __future__ import annotations

import random
from decimal import Decimal

import pytest

from rlvr.domains.sql.schemas import SCHEMAS, inserts, sql_value
from rlvr.domains.sql.source import IMAGE, dataset
from rlvr.domains.sql.templates import MIGRATIONS, QUERIES, TEMPLATES
from rlvr.domains.sql.verifier import SqlVerifier, _flags
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.settings import settings_of
from rlvr.verify.base import VerifyContext


def test_tasks_are_rebuilt_exactly_and_tiered() -> None:
    first = [registry.make("sql", seed=2).get(i) for i in range(9)]
    assert first == [registry.make("sql", seed=2).get(i) for i in range(9)]
    assert [t.tier for t in first[:3]] == ["easy", "medium", "hard"]
    assert len({t.id for t in first}) == 9 and all(t.image == IMAGE for t in first)
    assert {"query", "migration"} == {TEMPLATES[t.verifier["template"]].kind
                                      for t in (registry.make("sql", seed=s).get(1) for s in range(12))}


def test_a_task_holds_its_schema_visible_data_and_a_stub_and_runs_psql_as_its_tests() -> None:
    task = registry.make("sql", templates=("bank_reconciliation",), tier="hard").get(0)
    assert set(task.workspace) == {"db/schema.sql", "db/data.sql", "query.sql"}
    assert task.workspace["db/data.sql"] == dataset(TEMPLATES["bank_reconciliation"],
                                                    task.verifier["data_seed"])
    assert "CREATE TABLE bank_lines" in task.workspace["db/schema.sql"]
    command = settings_of(task).test_command()
    assert command[:1] == ["psql"] and "query.sql" in command
    mig = registry.make("sql", kind="migration").get(0)
    assert "migration.sql" in mig.workspace and "-1" in settings_of(mig).test_command()


def test_bad_settings_are_one_line_with_the_fix() -> None:
    with pytest.raises(UserError, match="did you mean 'running_total'"):
        registry.make("sql", templates=("runing_total",))
    with pytest.raises(UserError, match="kind"):
        registry.make("sql", kind="view")
    with pytest.raises(UserError, match="no sql task of tier 'easy'"):
        registry.make("sql", tier="easy", kind="migration").get(0)


@pytest.mark.parametrize("seed", range(8))
def test_every_dataset_holds_what_the_questions_turn_on(seed: int) -> None:
    shop = SCHEMAS["shop"].generate(random.Random(seed))
    buyers = {o[1] for o in shop["orders"]}
    assert any(c[0] not in buyers for c in shop["customers"])  # customers who never ordered
    assert any(c[2] is None for c in shop["customers"])  # and some without an email
    assert {o[3] for o in shop["orders"]} & {"cancelled", "refunded"}
    hr = SCHEMAS["hr"].generate(random.Random(seed))
    staff = {e[0]: e for e in hr["employees"]}
    assert any(e[2] is None for e in staff.values())  # without a department
    assert staff[7][3] == 2 and staff[7][4] == staff[2][4]  # paid exactly what their manager is paid
    assert staff[5][4] > staff[staff[5][3]][4]  # paid more than their manager
    led = SCHEMAS["ledger"].generate(random.Random(seed))
    totals: dict[int, Decimal] = {}
    for e in led["entries"]:
        totals[e[1]] = totals.get(e[1], Decimal(0)) + e[4] - e[5]
    off = {v for v in totals.values() if v}  # unbalanced batches: one below zero, the others above
    assert min(off) == Decimal("-7.25") and off <= {Decimal("-7.25"), Decimal("10.00")}
    refs = {b[3] for b in led["bank_lines"]}
    assert "INV-001" not in refs and any(r.startswith("FEE-") for r in refs)


def test_values_are_quoted_for_sql() -> None:
    assert sql_value("O'Hara") == "'O''Hara'" and sql_value(None) == "NULL"
    assert sql_value(Decimal("1.50")) == "1.50"
    text = inserts(SCHEMAS["hr"], {"departments": [(1, "Ops", None)], "employees": []})
    assert text == "INSERT INTO departments VALUES\n  (1, 'Ops', NULL);\n"


def test_each_wrong_answer_is_one_edit_of_the_reference() -> None:
    assert len(QUERIES) >= 12 and len(MIGRATIONS) >= 6
    for t in TEMPLATES.values():
        p = t.params(random.Random(1))
        assert t.wrong(p) != t.reference(p) and t.text(p) and "{" not in t.reference(p), t.name
        if t.kind == "migration":
            assert t.tables and t.inspect and t.probes, t.name


def _run(rows: list, columns: int = 2, ok: bool = True, error: str = "") -> dict:
    return {"ok": ok, "rows": rows, "columns": columns, "error": error}


def test_a_query_passes_only_on_every_dataset_and_a_constant_answer_is_flagged() -> None:
    v = SqlVerifier(VerifyContext())
    ref = [[[["n", "1"], "a"]], [[["n", "2"], "b"]], [[["n", "3"], "c"]]]
    good = [{"reference": _run(r), "candidate": _run(r)} for r in ref]
    assert v._judge("query", "SELECT ...", good, 0, {}).passed
    wrong_once = [*good[:2], {"reference": _run(ref[2]), "candidate": _run(ref[1])}]
    verdict = v._judge("query", "SELECT ...", wrong_once, 0, {})
    assert verdict.score == 0.0 and not verdict.flags and "row 1" in verdict.checks[2].detail
    constant = [{"reference": _run(r), "candidate": _run(ref[0])} for r in ref]
    verdict = v._judge("query", "SELECT 1, 'a'", constant, 0, {})
    assert verdict.score == 0.0 and [f.kind for f in verdict.flags] == ["hard_coded"]


def test_sql_that_reaches_beyond_its_role_or_reads_the_servers_activity_is_flagged() -> None:
    for sql, kind in (("COPY t TO PROGRAM 'id'", "privilege_escalation"),
                      ("select pg_read_file('/etc/passwd')", "privilege_escalation"),
                      ("SET ROLE postgres; select 1", "privilege_escalation"),
                      ("alter role agent superuser", "privilege_escalation"),
                      ("select query from pg_stat_activity", "catalog_snooping")):
        assert [f.kind for f in _flags(sql, [])] == [kind], sql
    assert _flags("SELECT 1", [{"ok": False, "error": "42501: permission denied"}])[0].kind == \
        "privilege_escalation"
    assert _flags("SELECT country, COUNT(*) FROM customers GROUP BY country", []) == []
