"""Eval reports: the unbiased pass@k estimator, intervals, mask reasons, reports and comparisons."""
from __future__ import annotations

import json
import math

import pytest

from rlvr.errors import UserError
from rlvr.monitor.evals import bootstrap_ci, compare, load_report, pass_at_k, report, task_counts
from rlvr.rollout.episode import Episode
from rlvr.verify import Verdict


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4), (5, 2, 2, 1 - 3 / 10), (5, 0, 3, 0.0), (3, 2, 2, 1.0), (10, 3, 5, 1 - 21 / 252),
    (1, 1, 1, 1.0), (200, 10, 10, 1 - math.comb(190, 10) / math.comb(200, 10)),
])
def test_pass_at_k_by_hand(n, c, k, expected) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, 1, 4), (3, 1, 0), (0, 0, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_bootstrap_interval() -> None:
    lo, hi = bootstrap_ci([0.0, 1.0] * 50)
    assert lo < 0.5 < hi and hi - lo < 0.3
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    assert bootstrap_ci([0.0, 1.0], seed=1) == bootstrap_ci([0.0, 1.0], seed=1)


def ep(domain: str, task: str, passed: bool, masked: bool = False) -> Episode:
    verdict = Verdict.infra("down") if masked else Verdict(score=float(passed), passed=passed)
    return Episode(task_id=task, domain=domain, verdict=verdict, status="infra_error" if masked else "done")


def test_report_counts_and_masks() -> None:
    eps = [ep("a", "t1", True), ep("a", "t1", False), ep("a", "t1", False, masked=True),
           ep("a", "t2", False), ep("a", "t2", False), ep("b", "u1", True, masked=True)]
    assert task_counts(eps) == {"a": {"t1": [2, 1], "t2": [2, 0]}, "b": {"u1": [0, 0]}}
    rep = report(eps, k=2, seed=0, policy="p", tasks="a,b")
    a, b = rep["domains"]["a"], rep["domains"]["b"]
    assert (a["n"], a["samples"], a["pass@1"], a["pass@k"], a["masked_episodes"]) == (2, 4, 0.25, 0.5, 1)
    assert b["n"] == 0 and b["pass@1"] is None and b["unjudged_tasks"] == 1
    assert json.loads(json.dumps(rep)) == rep


def test_compare_is_paired_on_shared_tasks() -> None:
    a = report([ep("d", f"t{i}", i < 2) for i in range(4)], k=1, seed=0, policy="a", tasks="d")
    b = report([ep("d", f"t{i}", i < 3) for i in range(4)] + [ep("e", "x", True)], k=1, seed=0, policy="b",
               tasks="d")
    d = compare(a, b)["domains"]
    assert d["d"]["delta_pass@1"] == pytest.approx(0.25) and d["d"]["shared_tasks"] == 4
    assert d["e"]["a_pass@1"] is None and d["e"]["delta_pass@1"] is None


def test_load_report_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="no eval report"):
        load_report(tmp_path)
    (tmp_path / "eval.json").write_text("{")
    with pytest.raises(UserError, match="not a JSON eval report"):
        load_report(tmp_path)
    (tmp_path / "eval.json").write_text("[]")
    with pytest.raises(UserError, match="no `domains`"):
        load_report(tmp_path / "eval.json")


def test_mask_reasons_count_by_where_and_kind() -> None:
    from rlvr.monitor.evals import first_mask_error, mask_reasons

    def ep(i: int, **kw) -> Episode:
        return Episode(task_id=f"t{i}", domain="d", **kw)

    episodes = [
        ep(0, status="infra_error",
           metadata={"error": "generation failed: after 4 attempts: ConnectError: refused"}),
        ep(1, status="infra_error", metadata={"error": "ConnectError: All connection attempts failed"}),
        ep(2, verdict=Verdict.infra("sandbox worker died"), status="infra_error"),
        ep(3, verdict=Verdict(score=1.0, passed=True), status="done"),
    ]
    assert mask_reasons(episodes) == {"rollout: ConnectError": 2, "verifier: sandbox worker died": 1}
    assert first_mask_error(episodes) == "rollout: generation failed: after 4 attempts: ConnectError: refused"
    assert report(episodes, k=1, seed=0, policy="p", tasks="d")["masked_episodes"] == 3


def loop_ep(task: str, outcomes: list[bool], passed: bool) -> Episode:
    return Episode(task_id=task, domain="code", metadata={"attempts": outcomes},
                   verdict=Verdict(score=float(passed), passed=passed), status="done")


def test_loop_summary_has_ratio_intervals_over_tasks() -> None:
    from rlvr.monitor.evals import loop_summary, ratio_ci

    eps = [loop_ep(f"t{i}", [False, i % 2 == 0], i % 2 == 0) for i in range(40)]
    s = loop_summary(eps)
    assert s is not None and s["episodes"] == 40 and s["tasks"] == 40
    assert s["first_attempt_pass"] == 0 and s["recovery_rate"] == 0.5 and s["recovery_rate_n"] == 40
    lo, hi = s["recovery_rate_ci"]
    assert lo < 0.5 < hi and hi - lo < 0.4
    assert ratio_ci([1, 1], [2, 2]) == (0.5, 0.5) and math.isnan(ratio_ci([], [])[0])
    assert loop_summary([ep("a", "t", True)]) is None
    rep = report(eps, k=1, seed=0, policy="p", tasks="code")
    assert rep["domains"]["code"]["loop"]["recovery_rate"] == 0.5 and len(rep["per_task_loop"]["code"]) == 40
    assert "loop" not in report([ep("a", "t", True)], k=1, seed=0, policy="p", tasks="a")["domains"]["a"]


def test_compare_gives_paired_loop_differences() -> None:
    before = report([loop_ep(f"t{i}", [False, i < 10], i < 10) for i in range(40)], k=1, seed=0, policy="a",
                    tasks="code")
    after = report([loop_ep(f"t{i}", [False, i < 30], i < 30) for i in range(40)], k=1, seed=0, policy="b",
                   tasks="code")
    loop = compare(before, after)["domains"]["code"]["loop"]
    assert loop["delta_recovery_rate"] == pytest.approx(0.5) and loop["a_recovery_rate"] == 0.25
    lo, hi = loop["delta_recovery_rate_ci"]
    assert 0.2 < lo < 0.5 < hi < 0.8
    assert loop["delta_first_attempt_pass"] == 0 and loop["delta_attempts"] == 0
    plain = report([ep("code", "t0", True)], k=1, seed=0, policy="a", tasks="code")
    assert "loop" not in compare(plain, after)["domains"]["code"]
