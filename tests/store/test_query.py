"""`rlvr query`: DuckDB SQL over the table `episodes`."""
from __future__ import annotations

import json

import pytest

from rlvr.errors import UserError
from rlvr.store import EpisodeStore
from rlvr.store.query import query
from tests.store.synthetic import episode, write_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    write_run(d, plant="flag_rate", steps=8, monitor=False)
    return d


def test_aggregates_match_the_episodes(run_dir):
    store = EpisodeStore(run_dir)
    eps = store.episodes()
    rows = query(store, "SELECT domain, count(*) AS n, avg(passed::INT) AS p, sum(num_flags > 0) AS flagged "
                        "FROM episodes GROUP BY domain").to_pylist()
    assert rows == [{"domain": "code", "n": len(eps),
                     "p": pytest.approx(sum(e.passed for e in eps) / len(eps)),
                     "flagged": sum(bool(e.verdict.flags) for e in eps)}]


def test_nested_columns_are_queryable(run_dir):
    store = EpisodeStore(run_dir)
    kinds = query(store, "SELECT DISTINCT unnest(flag_kinds) AS k FROM episodes").column("k").to_pylist()
    assert kinds == ["tampering"]
    checks = query(store, "SELECT c.name, c.passed FROM (SELECT unnest(checks) AS c FROM episodes) "
                          "WHERE NOT c.passed LIMIT 1").to_pylist()
    assert checks == [{"name": "hidden/test_sol.py::test_a", "passed": False}]
    t = query(store,
              "SELECT timings['generate'] AS g, time_generate_s AS g2 FROM episodes LIMIT 1").to_pylist()[0]
    assert t["g"] == t["g2"] > 0


def test_the_view_keeps_the_newest_write_of_an_episode(tmp_path):
    store = EpisodeStore(tmp_path)
    ep = episode(0, "t", reward=0.0)
    store.write(0, [ep])
    store.write(0, [ep.model_copy(update={"reward": 1.0})])
    assert query(store, "SELECT reward FROM episodes").to_pylist() == [{"reward": 1.0}]


def test_an_empty_run_answers_with_no_rows(tmp_path):
    assert query(EpisodeStore(tmp_path), "SELECT count(*) AS n FROM episodes").to_pylist() == [{"n": 0}]


@pytest.mark.parametrize("sql", ["", "SELEC 1", "SELECT nope FROM episodes", "SELECT * FROM missing_table"])
def test_bad_sql_is_a_user_error(tmp_path, sql):
    EpisodeStore(tmp_path).write(0, [episode(0, "t")])
    with pytest.raises(UserError):
        query(EpisodeStore(tmp_path), sql)


def test_cli_json_and_table(run_dir, cli):
    res = cli(["query", str(run_dir), "SELECT step, count(*) AS n FROM episodes GROUP BY 1 ORDER BY 1",
               "--json"])
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout) == [{"step": s, "n": 32} for s in range(8)]
    res = cli(["query", str(run_dir), "SELECT task_id, flag_kinds FROM episodes ORDER BY step DESC",
               "--max-rows", "3"])
    assert res.code == 0 and "task_id" in res.stdout and "(3 shown)" in res.stdout


def test_cli_errors_are_one_line(tmp_path, cli):
    res = cli(["query", str(tmp_path / "nope"), "SELECT 1"])
    assert res.code == 2 and "no such run directory" in res.stderr and "Traceback" not in res.stderr
    EpisodeStore(tmp_path).write(0, [episode(0, "t")])
    res = cli(["query", str(tmp_path), "SELECT FROM WHERE"])
    assert (res.code == 2 and res.stderr.startswith("error: SQL error")
            and len(res.stderr.strip().splitlines()) == 1)


def test_cli_json_numbers_are_numbers(run_dir, cli):
    """DuckDB sums integers as HUGEINT and keeps DECIMALs: both reach Python as Decimal, and JSON must still
    hold numbers (an int for a count or an integer sum, a float for a fraction), never their text."""
    sql = ("SELECT count(*) AS n, sum(step) AS total, sum(num_flags > 0) AS flagged, avg(reward) AS mean, "
           "sum(1.25::DECIMAL(10, 2)) AS dec, [sum(step)] AS listed, {'s': sum(step)} AS nested, "
           "'nan'::DOUBLE AS nan FROM episodes")
    res = cli(["query", str(run_dir), sql, "--json"])
    assert res.code == 0, res.stderr
    store = EpisodeStore(run_dir)
    eps = store.episodes()
    [row] = json.loads(res.stdout)
    assert row["n"] == len(eps) and type(row["n"]) is int
    assert row["total"] == sum(e.step for e in eps) and type(row["total"]) is int
    assert row["flagged"] == sum(bool(e.verdict.flags) for e in eps) and type(row["flagged"]) is int
    assert isinstance(row["mean"], float) and row["dec"] == 1.25 * len(eps) and type(row["dec"]) is float
    assert row["listed"] == [row["total"]] and row["nested"] == {"s": row["total"]}
    assert row["nan"] is None  # JSON has no NaN: null, so that any JSON reader can read the output
    table = cli(["query", str(run_dir), "SELECT sum(step) AS total FROM episodes"])
    # not quoted text: piped, the table is plain lines of cells
    assert table.code == 0 and str(row["total"]) in table.stdout.split() and '"' not in table.stdout
