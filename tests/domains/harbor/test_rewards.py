"""The reward rules: which file, how a table becomes one score, and every malformed reward a one-line 0."""
from __future__ import annotations

import pytest

from rlvr.domains.harbor.rewards import REWARD_FILES, RewardError, read_rewards, verdict_of

TXT, JSON, JSONS = "/logs/verifier/reward.txt", "/logs/verifier/reward.json", "/logs/verifier/rewards.json"


@pytest.mark.parametrize("files, score, passed", [
    ({TXT: "1\n"}, 1.0, True),
    ({TXT: "0.25"}, 0.25, False),
    ({TXT: " 0 "}, 0.0, False),
    ({JSON: "0.5"}, 0.5, False),
    ({JSON: '{"reward": 1}', TXT: "0"}, 1.0, True),  # reward.json first, as Harbor reads it
    ({JSONS: '{"a": 1, "b": 0}', TXT: "1"}, 0.5, False),  # rewards.json, the template's name, before .txt
    ({JSON: '{"a": 1, "b": 0.5, "c": 0}'}, 0.5, False),  # no `reward` entry: the mean, each a check
    ({JSON: '{"a": 1, "b": 1}'}, 1.0, True),
    ({JSON: '{"reward": 0.75, "style": 0}'}, 0.75, False),  # `reward` decides; the rest is kept, weight 0
])
def test_a_reward_file_becomes_a_verdict_with_partial_credit(files: dict, score: float, passed: bool) -> None:
    file, rewards = read_rewards(files)
    assert file == next(f for f in REWARD_FILES if f in files)
    verdict = verdict_of(rewards, file)
    assert verdict.score == pytest.approx(score) and verdict.passed is passed
    assert {c.name.rsplit(":", 1)[-1] for c in verdict.checks} == set(rewards)
    if "reward" in rewards and len(rewards) > 1:
        others = [c.weight for c in verdict.checks if not c.name.endswith(":reward")]
        assert others == [0.0] * (len(rewards) - 1)


@pytest.mark.parametrize("files, what", [
    ({}, "wrote no reward"),
    ({TXT: ""}, "is empty"),
    ({TXT: "yes"}, "not a number"),
    ({TXT: "nan"}, "outside [0, 1]"),
    ({TXT: "1.5"}, "outside [0, 1]"),
    ({TXT: "-0.1"}, "outside [0, 1]"),
    ({JSON: "true"}, "not a number"),
    ({JSON: '"1"'}, "not a number"),
    ({JSON: '{"reward": "1"}'}, "not a number"),
    ({JSON: '{"a": 1, "b": null}'}, "not a number"),
    ({JSON: "{}"}, "empty table"),
    ({JSON: "[1]"}, "not a number"),
    ({JSON: "{reward: 1"}, "not JSON"),
    ({JSON: "Infinity"}, "outside [0, 1]"),
    ({"/logs/verifier/other.txt": "1"}, "wrote no reward"),
])
def test_a_reward_rlvr_cannot_read_is_one_line_naming_the_file(files: dict, what: str) -> None:
    with pytest.raises(RewardError) as exc:
        read_rewards(files)
    message = str(exc.value)
    assert what in message and "\n" not in message and "/logs/verifier/reward" in message
