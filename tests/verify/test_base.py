"""Verifier kinds: each declares a typed settings model (in its Domain record), read once per task; seeds
derive by label."""
from __future__ import annotations

import ast
import inspect
import itertools
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr.domains.code.settings import CodeSettings
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain, VerifierKind
from rlvr.tasks.loaders import JsonlPack
from rlvr.tasks.settings import known_settings, model_of
from rlvr.tasks.source import ListSource
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify import base
from rlvr.verify.base import VerifierSettings, VerifyContext, derive_seed, settings_of, verifier_kinds
from rlvr.verify.verdict import Verdict

KIND = "test-echo"


class EchoSettings(VerifierSettings):
    """Settings of the test kind."""

    expect: str = "yes"
    """The answer that passes."""


class _Echo:
    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        ok = final.answer == settings_of(task, EchoSettings).expect
        return Verdict(score=float(ok), passed=ok)


@pytest.fixture
def echo() -> Iterator[None]:
    registry.register(_echo_domain(KIND))
    yield
    registry.unregister(KIND)


def _echo_domain(name: str, settings: type = EchoSettings) -> Domain:
    return Domain(name, lambda _cfg: ListSource([]), verifiers={KIND: VerifierKind(_Echo, settings)})


def _task(**verifier: object) -> Task:
    return Task(id="t", domain="anything", prompt="say it", verifier={"kind": KIND, **verifier})


def test_settings_are_typed_and_validated_once_per_task(echo: None) -> None:
    task = _task(expect="no")
    s = settings_of(task)
    assert isinstance(s, EchoSettings) and s.expect == "no" and s.kind == KIND
    assert settings_of(task) is s and settings_of(task, EchoSettings) is s
    assert base.verify(task, FinalState(answer="no")).passed


def test_a_bad_key_is_one_user_error_with_did_you_mean(echo: None) -> None:
    with pytest.raises(UserError, match=r"^pack\.jsonl:3 \[verifier\.expekt\]: unknown field \(did you mean "
                                        r"'expect'\?\)$"):
        settings_of(_task(expekt="no").model_copy(update={"source": "pack.jsonl:3"}))


def test_a_jsonl_task_is_checked_when_it_loads(echo: None, tmp_path: Path) -> None:
    p = tmp_path / "pack.jsonl"
    p.write_text("\n".join(json.dumps({"domain": "x", "prompt": "p", "verifier": v})
                           for v in ({"kind": KIND}, {"kind": KIND, "expect": 3}, {"kind": "test-ecko"})))
    pack = JsonlPack(p)
    assert settings_of(pack.get(0)).expect == "yes"
    with pytest.raises(UserError, match=rf"{p}:2 \[verifier\.expect\]: Input should be a valid string"):
        pack.get(1)
    with pytest.raises(UserError, match=rf"{p}:3 \[verifier\.kind\]: unknown verifier kind 'test-ecko' "
                                        rf"\(did you mean '{KIND}'"):
        pack.get(2)


def test_registration_refuses_duplicates_and_untyped_settings(echo: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(_echo_domain(KIND))
    with pytest.raises(ValueError, match=f"verifier kind '{KIND}' is already registered"):
        registry.register(_echo_domain("test-other", settings=VerifierSettings))  # another record, same kind
    with pytest.raises(TypeError, match="VerifierSettings"):
        VerifierKind(_Echo, settings=dict)  # type: ignore[arg-type]
    assert "test-other" not in registry.names()


def test_every_built_in_kind_declares_a_frozen_strict_documented_model() -> None:
    for kind in verifier_kinds():
        model = model_of(kind)
        assert model is not None, kind
        assert model.model_config.get("frozen") and model.model_config.get("extra") == "forbid", kind
        documented = set().union(*(_documented_fields(c) for c in model.__mro__ if c is not object))
        assert set(model.model_fields) <= documented, (kind, set(model.model_fields) - documented)


def _documented_fields(cls: type) -> set[str]:
    """Fields of a class body followed by a docstring (nested models too)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return set()
    body = tree.body[0].body  # type: ignore[attr-defined]
    return {a.target.id for a, b in itertools.pairwise(body) if isinstance(a, ast.AnnAssign)
            and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr)
            and isinstance(b.value, ast.Constant)}


def test_procedural_domains_build_tasks_with_valid_settings() -> None:
    for name in registry.names():
        src = registry.make(name)
        for i in src.indices(1):
            settings_of(src.get(i))  # raises on a bad table


def test_known_settings_serve_layers_that_run_every_task() -> None:
    code = registry.make("code", tier="easy").get(0)
    assert isinstance(known_settings(code), CodeSettings)
    assert known_settings(Task(id="t", domain="no-verifier-here", prompt="p")) is None


def test_derived_seeds_are_deterministic_and_labelled() -> None:
    assert derive_seed(7, "cases", "code/a") == derive_seed(7, "cases", "code/a")
    assert len({derive_seed(7, "cases", "code/a"), derive_seed(8, "cases", "code/a"),
                derive_seed(7, "cases", "code/b")}) == 3
    assert 0 <= derive_seed(2**40, "x") < 2**32
