"""Failure mining: error signatures, clusters, and `rlvr failures`."""
from __future__ import annotations

import json

import pytest

from rlvr.envs.messages import Message
from rlvr.rollout.episode import Episode
from rlvr.store import EpisodeStore
from rlvr.store.failures import cluster, find_exception, normalise, signature
from tests.store.synthetic import TRACEBACK, episode


def test_normalise_strips_particulars():
    a = normalise("AssertionError: assert 3 == 4 in '/tmp/ws/a.py' at 0x7f3a2b")
    b = normalise("AssertionError: assert 17 == -2 in '/tmp/other/b.py' at 0x11")
    assert a == b == "AssertionError: assert <n> == <n> in <str> at <hex>"
    assert normalise("took 10s reading /var/tmp/x/y.txt") == "took <n>s reading <path>"
    assert normalise("\n\n  first line  \nsecond") == "first line"
    assert len(normalise("x" * 1000)) == 120


def test_find_exception_takes_the_traceback_tail():
    assert find_exception(TRACEBACK.format(n=5)) == ("IndexError", "list index out of range")
    assert find_exception("ValueError: bad\nlater\nmodule.sub.KeyError: 'k'") == ("KeyError", "<str>")
    assert find_exception("all good") is None


def test_same_error_with_different_numbers_is_one_cluster():
    eps = [episode(0, f"t{i}", error=TRACEBACK.format(n=i)) for i in range(5)]
    eps += [episode(0, "t9", error="ZeroDivisionError: division by zero",
                    failing_check="hidden/t.py::test_z")]
    eps += [episode(0, "ok", reward=1.0)]
    clusters = cluster(eps)
    assert [c.count for c in clusters] == [5, 1]
    top = clusters[0].signature
    assert (top.kind, top.error_type, top.message, top.check) == \
        ("check", "IndexError", "list index out of range", "hidden/test_sol.py::test_a")
    assert clusters[0].tasks["t3"] == 1 and clusters[0].domains == {"code": 5}


@pytest.mark.parametrize(("ep", "key"), [
    (episode(0, "t", flags=("tampering", "exit_trick"), reward=1.0), "flag: exit_trick+tampering"),
    (episode(0, "t", infra="sandbox died at 0xdead"), "infra: sandbox died at <hex>"),
    (Episode(task_id="t", domain="d", status="truncated", truncated_by="turns"), "truncated: turns"),
    (Episode(task_id="t", domain="d"), "unverified"),
    (Episode(task_id="t", domain="d", messages=[Message(role="tool", content="RecursionError: too deep 999",
                                                        exec_status="exit_nonzero")]),
     "exception: RecursionError: too deep <n>"),
])
def test_signature_kinds(ep, key):
    assert signature(ep).key == key


def test_cli_failures_table_and_json(tmp_path, cli):
    store = EpisodeStore(tmp_path)
    store.write(0, [episode(0, f"t{i}", error=TRACEBACK.format(n=i), domain="code" if i % 2 else "math")
                    for i in range(6)])
    store.write(1, [episode(1, "h", flags=("tampering",), reward=1.0), episode(1, "p", reward=1.0)])
    res = cli(["failures", str(tmp_path), "--json"])
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert [c["count"] for c in data] == [6, 1]
    assert data[0]["domains"] == {"code": 3, "math": 3} and len(data[0]["examples"]) == 5
    res = cli(["failures", str(tmp_path)])
    assert res.code == 0 and "IndexError" in res.stdout and "7 failed episodes in 2 clusters" in res.stdout


def test_cli_failures_on_a_missing_run(tmp_path, cli):
    res = cli(["failures", str(tmp_path / "none")])
    assert res.code == 2 and "no such run directory" in res.stderr


def test_cli_shows_hostile_signatures_as_text(tmp_path, cli):
    EpisodeStore(tmp_path).write(0, [episode(0, "t", error="ValueError: [bold red]boom[/] [/oops]")])
    res = cli(["failures", str(tmp_path)])
    assert res.code == 0, res.stderr  # as markup, `[/oops]` would raise: it closes no open tag
    assert "[bold" in res.stdout and "boom" in res.stdout
