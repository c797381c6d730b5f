"""Per-step metrics from episodes."""
from __future__ import annotations

import pytest

from rlvr.monitor.metrics import METRICS, compute_metrics
from rlvr.rollout.episode import Episode
from tests.store.synthetic import episode


def test_metrics_of_a_mixed_batch():
    eps = [episode(0, "a", domain="code", sample=0, reward=1.0, group="g1"),
           episode(0, "a", domain="code", sample=1, reward=0.0, group="g1", exec_status="timeout", error="t"),
           episode(0, "b", domain="math", sample=0, reward=1.0, group="g2", flags=("tampering",), length=150),
           episode(0, "b", domain="math", sample=1, reward=1.0, group="g2"),
           episode(0, "c", domain="math", sample=0, infra="sandbox crashed", group="g3")]
    m = compute_metrics(eps)
    assert m["episodes/count"] == 5
    assert m["pass_rate/code"] == 0.5 and m["pass_rate/math"] == 0.5  # masked episode left out
    assert m["pass_rate"] == pytest.approx(2 / 4)
    assert m["reward/mean"] == pytest.approx(3 / 4) and m["reward/max"] == 1.0
    assert m["flags/rate"] == pytest.approx(1 / 5) and m["flags/tampering"] == pytest.approx(1 / 5)
    assert m["infra/rate"] == pytest.approx(1 / 5)
    assert m["episode/length"] == pytest.approx((50 * 4 + 150) / 5) and m["episode/length_max"] == 150
    # five tool executions (the masked episode ran one too), one timed out
    assert (m["sandbox/timeout_rate"] == pytest.approx(1 / 5)
            and m["sandbox/exec_error_rate"] == pytest.approx(1 / 5))
    assert 20 <= m["sandbox/p50_ms"] <= 60
    # g1 has 1.0 and 0.0; g2 has 1.0 and 1.0 (zero variance); g3 is a single masked episode.
    assert m["groups/count"] == 2 and m["groups/zero_variance_share"] == 0.5
    assert m["policy/tokens_per_s"] == pytest.approx(100.0)
    assert m["episode_time/generate"] > 0


def test_empty_batch_gives_only_the_count():
    assert compute_metrics([]) == {"episodes/count": 0.0}


def test_every_family_namespaces_its_metrics():
    eps = [episode(0, "a", reward=0.5, passed=False), Episode(task_id="z", domain="d")]
    for family, fn in METRICS.items():
        for name in fn(eps):
            assert name.split("/")[0] in (family, "verdict"), name


def test_agent_metrics_read_tool_use_from_the_env_transcripts(pool):
    from rlvr.monitor.metrics import agent_metrics
    from tests.monitor.agentic import FIX_RUN, PROSE, SINGLE, play, text_call

    fixed = play(pool, FIX_RUN, passed=True)  # 4 turns, 4 calls; the first run_tests exits non-zero
    flail = play(pool,
                 [PROSE, "<tool_call>{bad</tool_call>", text_call("nope"),
                  text_call("read_file", path="x.py")])
    prose = play(pool, [PROSE, PROSE])
    single = play(pool, ["4"], task=SINGLE, passed=True)  # no tools offered: not an agentic episode
    masked = episode(0, "m", infra="sandbox crashed")
    assert [m.role for m in single.messages] == ["user", "assistant"]
    m = agent_metrics([fixed, flail, prose, single, masked])
    assert m["agent/episodes"] == 3
    assert m["agent/tool_calls_per_episode"] == pytest.approx((4 + 2 + 0) / 3)
    # errors: the failing run_tests, the unknown tool, the missing file; the malformed call is not a tool call
    assert m["agent/tool_error_rate"] == pytest.approx(3 / 6)
    assert m["agent/malformed_calls_per_episode"] == pytest.approx(1 / 3)
    assert m["agent/no_tool_call_share"] == pytest.approx(1 / 3)
    assert m["agent/turns_to_pass"] == 4 and m["agent/run_tests_before_pass"] == 2
    assert m["agent/turns_per_episode"] == pytest.approx((4 + 4 + 2) / 3)
    assert {k: v for k,
            v in compute_metrics([fixed, single]).items() if k.startswith("agent/")} == agent_metrics([fixed])


def test_agent_metrics_count_timeouts_as_errors_and_skip_runs_without_tools(pool):
    from rlvr.monitor.metrics import agent_metrics
    from tests.monitor.agentic import SINGLE, play

    assert agent_metrics([episode(0, "t", exec_status="timeout",
                                  error="TimeoutError")])["agent/tool_error_rate"] == 1
    assert agent_metrics([episode(0, "t", exec_status="ok")])["agent/tool_error_rate"] == 0
    assert agent_metrics([episode(0, "t", exec_status="infra_error",
                                  error="x")])["agent/tool_error_rate"] == 0
    assert agent_metrics([play(pool, ["4"], task=SINGLE)]) == {}
    assert "agent/turns_to_pass" not in agent_metrics([episode(0, "t", reward=0.0)])  # no pass, no figure


def attempts_episode(outcomes: list[bool], passed: bool, task: str = "t", masked: bool = False) -> Episode:
    from rlvr.verify import Verdict

    verdict = Verdict.infra("down") if masked else Verdict(score=float(passed), passed=passed)
    return Episode(task_id=task, domain="code", metadata={"attempts": list(outcomes)}, verdict=verdict,
                   status="infra_error" if masked else "done", num_turns=len(outcomes))


def test_loop_metrics_of_attempts_episodes_by_hand():
    from rlvr.monitor.metrics import is_multi_turn, loop_metrics

    eps = [attempts_episode([True], True), attempts_episode([False, True], True),
           attempts_episode([False, False, True], False),  # its last answer passed the visible cases only
           attempts_episode([False, None], True),  # the last answer is unchecked: the verdict says
           attempts_episode([False, False, False], False), attempts_episode([False, True], True, masked=True),
           Episode(task_id="single", domain="code")]  # no attempt: not in the loop's figures
    m = loop_metrics(eps)
    assert m["loop/episodes"] == 5 and m["loop/pass_rate"] == 0.6
    assert m["loop/first_attempt_pass"] == 0.2 and m["loop/attempts"] == pytest.approx(11 / 5)
    # retries: 4 at attempt 2 (2 passed), 2 at attempt 3 (1 passed)
    assert m["loop/recovery_rate"] == pytest.approx(3 / 6)
    assert m["loop/recovery_rate_2"] == pytest.approx(2 / 4) and m["loop/recovery_rate_3"] == 0.5
    assert m["loop/pass_after_failure"] == pytest.approx(2 / 4)
    assert not any(is_multi_turn(e) for e in eps)  # an attempts episode answers: no tool-use figures
    assert loop_metrics([Episode(task_id="x", domain="d")]) == {}
    assert loop_metrics([attempts_episode([True], True)]).keys() == {
        "loop/episodes", "loop/pass_rate", "loop/first_attempt_pass", "loop/attempts"}


def test_a_tool_episode_attempts_are_its_test_runs_after_a_change(pool):
    from rlvr.monitor.metrics import attempt_outcomes, loop_metrics
    from tests.monitor.agentic import FIXED, play, text_call

    broken = "def add(a, b):\n    return a * b\n"
    actions = [text_call("run_tests"),  # before any change: not an attempt
               text_call("write_file", path="sol.py", content=broken), text_call("run_tests"),
               text_call("run_tests"),  # nothing changed since: not a new attempt
               text_call("write_file", path="sol.py", content=FIXED), text_call("run_tests"),
               text_call("submit")]
    ep = play(pool, actions, passed=True)
    assert attempt_outcomes(ep) == [False, True]
    m = loop_metrics([ep])
    assert m["loop/first_attempt_pass"] == 0 and m["loop/recovery_rate"] == 1 and m["loop/attempts"] == 2
    assert attempt_outcomes(play(pool, [text_call("submit")])) == []
