"""The domain registry: register, make, duplicates, did-you-mean, config validation."""
from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import Task


class CountConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: int = 0


class CountSource(TaskSource):
    def __init__(self, cfg: CountConfig) -> None:
        self.cfg = cfg

    @property
    def size(self) -> None:
        return None

    def get(self, index: int) -> Task:
        n = self.cfg.start + index
        return Task(id=f"n{n}", domain="counting", prompt=f"What comes after {n}?", answer=str(n + 1),
                    index=index)


@pytest.fixture
def counting():
    registry.register(Domain("counting", CountSource, CountConfig,
                             description="Say the next number.\nMore text."))
    yield
    registry.unregister("counting")


def test_register_and_make(counting: None) -> None:
    src = registry.make("counting", start=5)
    assert src.size is None and src.name == "counting"
    assert src.description == "Say the next number."
    assert src.get(0).answer == "6"
    assert "counting" in registry.names()
    assert [t.id for t in src.sample(3, offset=10)] == ["n15", "n16", "n17"]


def test_duplicate_refused(counting: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Domain("counting", CountSource, CountConfig))


def test_bad_names_refused() -> None:
    for bad in ("a b", "a,b", "a:b", ""):
        with pytest.raises(ValueError):
            Domain(bad, CountSource, CountConfig)


def test_unknown_domain_did_you_mean(counting: None) -> None:
    with pytest.raises(UserError, match="did you mean 'counting'"):
        registry.make("countng")
    with pytest.raises(UserError, match="unknown domain"):
        registry.make("zzzzzzzz")


def test_bad_config_is_user_error(counting: None) -> None:
    with pytest.raises(UserError, match=r"counting\.start"):
        registry.make("counting", start="many")
    with pytest.raises(UserError, match=r"counting\.colour"):
        registry.make("counting", colour=1)


def test_default_gold_and_negatives(counting: None) -> None:
    src = registry.make("counting")
    task = src.get(1)
    assert src.gold(task).answer == "2"
    neg = src.negatives(task)
    assert neg["empty_answer"].answer == "" and neg["echoed_prompt"].answer == task.prompt


def test_the_older_register_call_builds_the_same_record() -> None:
    registry.register("counting-old", CountSource, CountConfig, description="Say the next number.",
                      verifier="answer")
    try:
        d = registry.entry("counting-old")
        assert isinstance(d, Domain) and d.kind == "answer" and d.settings is CountConfig
        assert registry.make("counting-old", start=1).get(0).answer == "2"
    finally:
        registry.unregister("counting-old")


def test_an_entry_point_may_name_a_domain_a_list_or_a_function() -> None:
    d = Domain("ep-one", CountSource, CountConfig)
    assert registry._domains_of(d) == [d]
    assert registry._domains_of([d, d]) == [d, d]
    assert registry._domains_of(lambda: [d]) == [d]
    assert registry._domains_of(lambda: None) == []  # an older plugin that registered itself
    with pytest.raises(TypeError, match="expected a Domain"):
        registry._domains_of(lambda: 42)


def test_the_package_that_declared_a_domain_is_known(counting: None) -> None:
    assert registry.provider("code") == "rlvr" and registry.provider("harbor") == "rlvr"
    assert registry.provider("counting") is None  # registered in code, not by a package's entry point
    assert registry.provider("no-such-domain") is None
