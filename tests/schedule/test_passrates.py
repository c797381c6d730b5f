"""Pass-rate EMAs: the update rule, and the JSON file a later run starts from."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.schedule.passrates import PassRateTable


def test_first_round_sets_the_rate_then_ema_by_hand() -> None:
    t = PassRateTable(0.25)
    t.update("d/a", [True, False, False, False], step=1)
    assert t.rate("d/a") == 0.25
    t.update("d/a", [True, True], step=2)
    assert t.rate("d/a") == pytest.approx(0.75 * 0.25 + 0.25 * 1.0)
    stat = t.get("d/a")
    assert stat is not None and (stat.episodes, stat.passed, stat.rounds, stat.last_step) == (6, 3, 2, 2)


def test_an_empty_round_changes_nothing_and_unknown_tasks_have_no_rate() -> None:
    t = PassRateTable(0.5)
    assert t.update("d/a", []) is None
    assert t.rate("d/a") is None and "d/a" not in t and t.rate(None) is None


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    t = PassRateTable(0.3)
    t.update("d/a", [True, False], step=3, source="d", index=7)
    t.update("d/b", [False], step=3)
    path = t.save(tmp_path / "sub" / "pass_rates.json")
    u = PassRateTable(0.3)
    u.load(path)
    assert u.to_dict() == t.to_dict()
    assert u.get("d/a").index == 7 and u.get("d/a").source == "d"  # type: ignore[union-attr]
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize(("content", "match"), [
    ("{not json", "not valid JSON"),
    ('{"ema": 0.3, "tasks": {"d/a": {"ema": 1.5}}}', r"\[tasks.d/a.ema\]"),
    ('{"ema": 0.3, "tasks": {"d/a": {"ema": "high"}}}', r"\[tasks.d/a.ema\]"),
    ('{"ema": 0.3, "tasks": [1, 2]}', r"\[tasks\]"),
    ('{"ema": 0.3, "tasks": {}, "extra": 1}', r"\[extra\]"),
    ('{"ema": 0.3, "schema_version": 99, "tasks": {}}', "schema_version"),
    ("[]", "pass_rates.json"),
])
def test_malformed_files_are_user_errors_naming_the_file(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "pass_rates.json"
    path.write_text(content)
    with pytest.raises(UserError, match=match) as info:
        PassRateTable(0.3).load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file_names_the_config_field(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"schedule.pass_rates_from"):
        PassRateTable(0.3).load(tmp_path / "nope.json")


def test_saved_file_is_plain_json(tmp_path: Path) -> None:
    t = PassRateTable(0.3)
    t.update("d/a", [True])
    data = json.loads(t.save(tmp_path / "p.json").read_text())
    assert data["tasks"]["d/a"]["ema"] == 1.0 and data["schema_version"] == 1
