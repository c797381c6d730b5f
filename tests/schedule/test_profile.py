"""`rlvr tasks profile`: pass rates, tiers, learnable share, reward variance and verifier determinism."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.config import ScheduleConfig
from rlvr.schedule.profile import Determinism, check_determinism, profile_episodes
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.verdict import Flag, Verdict


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", domain="toy", prompt=f"Reply with {i}.", answer=str(i),
                 verifier={"kind": "answer"})
            for i in range(n)]


def test_profile_reports_rates_tiers_and_variance(make: SimpleNamespace) -> None:
    a, b, c, d = _tasks(4)
    eps = ([make.episode(a, True, group="a") for _ in range(4)] + [make.episode(b, False, group="b")
                                                                   for _ in range(4)]
           + [make.episode(c, i % 2 == 0, group="c") for i in range(4)] + [make.episode(c, True, infra=True)]
           + [make.episode(d, False, infra=True) for _ in range(4)])
    report = profile_episodes([a, b, c, d], eps, 4, ScheduleConfig(), Determinism())
    rows = {r.task: r for r in report.tasks}
    assert (rows["toy/t0"].pass_rate, rows["toy/t0"].tier) == (1.0, "always")
    assert (rows["toy/t1"].pass_rate, rows["toy/t1"].tier) == (0.0, "never")
    assert (rows["toy/t2"].pass_rate, rows["toy/t2"].tier, rows["toy/t2"].masked) == (0.5, "learnable", 1)
    assert rows["toy/t2"].reward_var == pytest.approx(0.25)
    assert (rows["toy/t3"].pass_rate, rows["toy/t3"].tier, rows["toy/t3"].reward_var) == (None, "unseen",
                                                                                          None)
    assert report.tier_counts == {"unseen": 1, "never": 1, "learnable": 1, "always": 1}
    assert report.learnable_share == pytest.approx(1 / 3)
    assert report.zero_variance_share == pytest.approx(2 / 3)
    assert report.reward_var_mean == pytest.approx(0.25 / 3)
    assert report.pass_rate == pytest.approx(6 / 12) and report.masked == 5
    assert json.loads(json.dumps(report.to_json()))["determinism"]["deterministic"] is None


def _verdict(passed: bool, flags: tuple[str, ...] = ()) -> Verdict:
    return Verdict(score=float(passed), passed=passed and not flags, flags=[Flag(kind=k) for k in flags])


def test_determinism_agrees_flags_disagreement_and_skips_infra(make: SimpleNamespace) -> None:
    tasks = _tasks(3)
    eps = [make.episode(t, True, sample=i) for t in tasks for i in range(4)]
    by_key = {t.key: t for t in tasks}
    steady = check_determinism(by_key, eps, lambda task, final, seed: _verdict(True), sample=5, seed=1)
    assert (steady.checked, steady.consistent, steady.deterministic) == (5, 5, True)
    flip = itertools.cycle([True, False])
    flaky = check_determinism(by_key, eps, lambda task, final, seed: _verdict(next(flip)), sample=100)
    assert flaky.checked == 12 and flaky.deterministic is False and len(flaky.mismatches) == 12
    assert "passed=False" in " ".join(flaky.mismatches[0].verdicts)
    flagged = check_determinism(by_key, eps, lambda task, final, seed: _verdict(True, ("tampering",)),
                                sample=3)
    assert len(flagged.mismatches) == 3  # a flag that comes and goes is a disagreement too
    down = check_determinism(by_key, eps, lambda task, final, seed: Verdict.infra("no sandbox"), sample=4)
    assert (down.checked, down.inconclusive, down.deterministic) == (0, 4, None)


def test_determinism_reverifies_the_stored_final_state_with_the_episode_seed(make: SimpleNamespace) -> None:
    task = _tasks(1)[0]
    ep = make.episode(task, True)
    ep.final_state = FinalState(answer="<answer>0</answer>")
    ep.seed = 1234
    calls: list[tuple[str | None, int]] = []

    def reverify(t: Task, final: FinalState, seed: int) -> Verdict:
        calls.append((final.answer, seed))
        return _verdict(True)

    check_determinism({task.key: task}, [ep], reverify)
    assert calls == [("<answer>0</answer>", 1234)] * 2


def test_cli_profiles_a_pack_under_a_scripted_policy(tmp_path: Path, cli) -> None:
    pack = tmp_path / "pack.jsonl"
    pack.write_text("".join(t.model_dump_json() + "\n" for t in _tasks(3)))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": ["<answer>0</answer>"],
                                  "match": [{"prompt_contains": "Reply with 1",
                                             "turns": ["<answer>1</answer>"]}]}))
    res = cli(["tasks", "profile", "--policy", f"scripted:{script}", "--tasks", str(pack), "-k", "2",
               "--json"])
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert {r["task"]: r["tier"] for r in data["tasks"]} == {"toy/t0": "always", "toy/t1": "always",
                                                             "toy/t2": "never"}
    assert data["masked"] == 0 and data["zero_variance_share"] == 1.0 and data["learnable_share"] == 0.0
    assert data["determinism"]["deterministic"] is True and data["determinism"]["checked"] == 6
    text = cli(["tasks", "profile", "--policy", f"scripted:{script}", "--tasks", str(pack), "-k", "2"])
    assert text.code == 0 and "deterministic" in text.stdout and "toy/t2" in text.stdout


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path: Path, cli) -> None:
    res = cli(["tasks", "profile", "--policy", "nonsense", "--tasks", str(tmp_path / "none.jsonl")])
    assert res.code == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    pack = tmp_path / "pack.jsonl"
    pack.write_text(_tasks(1)[0].model_dump_json() + "\n")
    res = cli(["tasks", "profile", "--policy", "bogus:thing", "--tasks", str(pack)])
    assert res.code == 2 and "policy" in res.stderr
    res = cli(["tasks", "profile", "--policy", "scripted:x.json", "--tasks", str(pack), "-k", "0"])
    assert res.code == 2 and "-k must be >= 1" in res.stderr
