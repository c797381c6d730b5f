"""Every reasoning-gym dataset as a domain: cheap registration, determinism, gold and negative controls."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rlvr.domains.reasoning_gym.source import PREFIX, SKIPPED, ReasoningGymSource, scan_datasets
from rlvr.domains.reasoning_gym.verifier import ReasoningGymVerifier
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.verify.base import VerifyContext

VERIFIER = ReasoningGymVerifier(VerifyContext())


def test_every_installed_dataset_is_a_domain() -> None:
    import reasoning_gym  # noqa: F401
    from reasoning_gym.factory import DATASETS

    assert set(scan_datasets()) == set(DATASETS)
    domains = {n for n in registry.names() if n.startswith(PREFIX)}
    assert domains == {PREFIX + n for n in DATASETS if n not in SKIPPED}
    assert len(domains) > 100
    assert all(registry.entry(d).description for d in domains)


def test_registration_and_listing_do_not_import_the_package() -> None:
    code = ("import sys\nfrom rlvr.tasks import registry\n"
            "srcs = [registry.make(n) for n in registry.names() if n.startswith('rg-')]\n"
            "assert all(s.size == 500 for s in srcs)\nprint('reasoning_gym' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_task_is_rebuilt_exactly_from_seed_and_index() -> None:
    a = registry.make("rg-chain_sum", seed=7, size=50)
    b = registry.make("rg-chain_sum", seed=7, size=50)
    assert a.get(13) == b.get(13)
    assert a.get(13).prompt != a.get(14).prompt
    assert registry.make("rg-chain_sum", seed=8, size=50).get(13).prompt != a.get(13).prompt
    task = a.get(13)
    assert (task.seed, task.index, task.source) == (7, 13, "rg-chain_sum:7:13")
    assert "<answer>" in task.prompt and task.answer in [None, task.answer]


def test_generator_settings_are_config() -> None:
    src = registry.make("rg-basic_arithmetic", size=5, min_terms=5, max_terms=5)
    assert src.get(0).metadata["settings"] == {"min_terms": 5, "max_terms": 5}
    assert src.get(0).metadata["rg_difficulty"]["num_terms"] == [5, 5]
    plain = registry.make("rg-basic_arithmetic", size=5)
    assert any(src.get(i).prompt != plain.get(i).prompt for i in range(5))


@pytest.mark.parametrize("settings,match", [({"min_termz": 3}, "unknown setting 'min_termz'"),
                                             ({"min_terms": 9, "max_terms": 2}, "invalid settings"),
                                             ({"size": 0}, "size")])
def test_bad_settings_raise_user_error(settings: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        registry.make("rg-basic_arithmetic", **settings)


def test_index_out_of_range_is_a_user_error() -> None:
    with pytest.raises(UserError, match="out of range"):
        registry.make("rg-gcd", size=3).get(3)


def test_ids_are_found_by_id() -> None:
    src = registry.make("rg-gcd", size=10)
    assert src.find("s0-4") == src.get(4)


@pytest.mark.parametrize("domain", sorted(n for n in registry.names() if n.startswith(PREFIX)))
def test_gold_scores_one_and_every_negative_control_zero(domain: str) -> None:
    src = registry.make(domain, size=20, seed=3)
    assert isinstance(src, ReasoningGymSource)
    task = src.get(0)
    gold = src.gold(task)
    assert gold is not None, "every dataset has a gold answer (reference, example or solver)"
    verdict = VERIFIER.verify(task, gold)
    assert verdict.score == 1.0 and verdict.passed, verdict.checks
    negatives = src.negatives(task)
    assert {"empty_answer", "echoed_prompt", "wrong_answer", "buried_answer",
            "hedged_answers"} <= set(negatives)
    for name, final in negatives.items():
        assert VERIFIER.verify(task, final).score == 0.0, name


def test_curriculum_level_sets_the_difficulty_settings() -> None:
    easy = registry.make("rg-basic_arithmetic", level=0, size=10)
    hard = registry.make("rg-basic_arithmetic", level=3, size=10)
    assert easy.settings["max_terms"] < hard.settings["max_terms"]
    assert easy.get(0).tier == "level-0"
    assert registry.make("rg-basic_arithmetic", level=3, max_terms=3, size=10).settings["max_terms"] == 3
    with pytest.raises(UserError, match="no curriculum"):
        registry.make("rg-acre", level=1)
    with pytest.raises(UserError, match="level"):
        registry.make("rg-gcd", level=-1)


class _FailingDataset:
    def __getitem__(self, index: int) -> dict:
        raise ValueError("Could not generate a puzzle with difficulty at least 20")


def test_generator_failure_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Some generators give up on hard settings (jugs at curriculum level 3, after minutes of search)."""
    from rlvr.domains.reasoning_gym import source as rg_domain

    monkeypatch.setattr(rg_domain, "_build", lambda *args: _FailingDataset())
    with pytest.raises(UserError, match="cannot generate item 0 of 'jugs'.*lower level"):
        registry.make("rg-jugs", seed=987_654, size=5).get(0)
