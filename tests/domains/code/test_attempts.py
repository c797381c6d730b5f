"""The tiny tier's attempts form: an example that does not pin the answer down, a visible case every rival
fails, hidden cases only the answer fits; gold trajectories with recoveries; the sandboxed check that says
back what failed."""
from __future__ import annotations

import ast

import pytest

from rlvr.domains.code.attempts import (
    CONVENTIONS,
    MIN_RIVALS,
    N_SHOWN,
    PAD_WIDTH,
    VISIBLE_IO,
    expression_pool,
)
from rlvr.domains.code.feedback import feedback
from rlvr.domains.code.problem import agrees
from rlvr.envs.feedback import message
from rlvr.errors import UserError
from rlvr.sandbox.base import SandboxPool
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.scorer import Scorer


def cases(text: str) -> list[tuple[tuple, object]]:
    return [ast.literal_eval(line) for line in text.splitlines() if line.strip()]


def pool_of(param: str) -> list:
    return expression_pool(param)


def test_the_example_leaves_rivals_and_the_visible_case_rejects_every_one() -> None:
    src = registry.make("code", tier="tiny", mode="attempts", seed=5)
    for i in range(150):
        t = src.get(i)
        assert t.attempts and not t.multi_turn and t.turns == 3 and t.limits.max_tokens == 144
        param, answer = t.prompt.split("(", 1)[1].split(")", 1)[0], t.answer
        visible = cases(t.workspace[VISIBLE_IO])
        hidden = cases(t.hidden["io_cases.txt"])
        shown, check = visible[:N_SHOWN], visible[N_SHOWN:]
        assert len(check) == 1 and t.prompt.count("=") == N_SHOWN  # the prompt shows the example only
        by_text = {e.text: e for e in pool_of(param)}
        target, rivals = by_text[answer], [by_text[r] for r in t.metadata["consts"]["rivals"]]
        assert len(rivals) >= MIN_RIVALS and answer not in t.metadata["consts"]["rivals"]
        assert agrees(target, visible) and agrees(target, hidden)
        assert all(agrees(r, shown) and not agrees(r, check) for r in rivals)
        assert not any(agrees(r, hidden) for r in rivals)  # a guess that ignored the failing case fails
        # with the visible cases, no expression of the pool but the answer fits: the hidden cases decide
        assert [e.text for e in pool_of(param) if agrees(e, visible)] == [answer]
        assert not {repr(a) for a, _ in visible} & {repr(a) for a, _ in hidden}
        assert t.verifier["visible_io"] == VISIBLE_IO and t.verifier["io"]["file"] == "io_cases.txt"
        assert t.metadata["visible"] == [[list(a), w] for a, w in visible]


def test_a_convention_is_shown_by_the_failing_case_only() -> None:
    """The fill and pad families: the example is full width (it shows no padding), the failing case is short
    and its expected result shows the padding character, which names the answer among its rivals."""
    src = registry.make("code", tier="tiny", mode="attempts", seed=3)
    conventions = {f.name for f in CONVENTIONS}
    tasks = [t for t in src.sample(300) if t.metadata["family"]
             in conventions]
    assert 0.3 < len(tasks) / 300 < 0.7
    for t in tasks:
        (shown_args, shown), (check_args, check) = cases(t.workspace[VISIBLE_IO])
        assert shown == shown_args[0] and len(shown) == PAD_WIDTH  # the example is its own padding
        assert len(check_args[0]) < PAD_WIDTH
        pad = check[-1]
        named = f"[{pad}]*" if isinstance(pad, int) else f"'{pad}'"  # how the expression writes it
        assert named in t.answer and not any(named in r for r in t.metadata["consts"]["rivals"])


def test_rebuilt_exactly_and_ids_name_the_mode() -> None:
    a, b = (registry.make("code", tier="tiny", mode="attempts", attempts=4) for _ in range(2))
    assert a.get(7).model_dump() == b.get(7).model_dump() and a.get(7).id == "tiny-attempts-s0-7"
    assert a.get(7).limits.max_turns == 4


def test_gold_attempts_recover_from_a_rival_in_the_configured_share() -> None:
    src = registry.make("code", tier="tiny", mode="attempts", gold_recoveries=0.5)
    golds = [(t, src.gold_attempts(t)) for t in src.sample(400)]
    recovering = [(t, g) for t, g in golds if len(g) == 2]
    assert 0.4 < len(recovering) / len(golds) < 0.6
    assert all(g[-1] == t.answer for t, g in golds) and all(len(g) <= 2 for _, g in golds)
    assert all(g[0] in t.metadata["consts"]["rivals"] for t, g in recovering)
    assert src.gold_attempts(golds[0][0]) == golds[0][1]  # drawn by the task's key
    none = registry.make("code", tier="tiny", mode="attempts", gold_recoveries=0.0)
    assert all(len(none.gold_attempts(t)) == 1 for t in none.sample(50))


def test_attempts_is_a_form_of_the_tiny_tier_only() -> None:
    with pytest.raises(UserError, match="attempts"):
        registry.make("code", tier="easy", mode="attempts")
    with pytest.raises(UserError):
        registry.make("code", tier="tiny", mode="attempts", attempts=1)


def test_visible_io_needs_io_cases_and_a_workspace_file() -> None:
    from rlvr.tasks.settings import settings_of

    t = registry.make("code", tier="tiny", mode="attempts").get(0)
    for bad in ({**t.verifier, "visible_io": "missing.txt"},
                {k: v for k, v in t.verifier.items() if k != "io"} | {"tests": ["io_cases.txt"]}):
        with pytest.raises(UserError, match="visible_io"):
            settings_of(t.model_copy(update={"verifier": bad}))


class CountingPool:
    """A pool that counts the leases the checks take (one per sandboxed run)."""

    def __init__(self, inner: SandboxPool) -> None:
        self.inner, self.leases = inner, 0
        self.python = getattr(inner, "python", None)

    def lease(self, *a, **kw):
        self.leases += 1
        return self.inner.lease(*a, **kw)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def task_with_rival(seed: int = 11) -> Task:
    src = registry.make("code", tier="tiny", mode="attempts", seed=seed)
    return next(t for t in src.sample(20) if t.metadata["family"] == "list")


def test_the_check_says_what_failed_and_passes_the_answer(pool: SandboxPool) -> None:
    t = task_with_rival()
    visible = cases(t.workspace[VISIBLE_IO])
    rival = t.metadata["consts"]["rivals"][0]
    check = feedback(pool, t, rival)
    assert not check.passed and len(check.failures) == 1 and not check.error
    (args, want), fail = visible[-1], check.failures[0]
    got = eval(f"lambda xs: {rival}")(*args)  # noqa: S307 (our own pool expression)
    assert fail.call == f"f({str(args[0]).replace(' ', '')})" and fail.expected == str(want)
    assert fail.got == f"returned {str(got).replace(' ', '')}"
    assert message(check) == f"{fail.call}={want} expected, returned {fail.got[9:]}"
    assert feedback(pool, t, t.answer).passed
    broken = feedback(pool, t, "xs[")
    assert not broken.passed and broken.error.startswith("SyntaxError") and len(broken.error) <= 80
    raising = feedback(pool, t, "xs[99]")
    assert {f.got for f in raising.failures} == {"raised IndexError"} and len(raising.failures) == 2


def test_checks_are_cached_by_task_and_answer(pool: SandboxPool) -> None:
    counting = CountingPool(pool)
    t = task_with_rival(seed=12)
    first = feedback(counting, t, "min(xs)")  # type: ignore[arg-type]
    runs = counting.leases
    assert feedback(counting, t, "min(xs)") == first and counting.leases == runs  # type: ignore[arg-type]
    feedback(counting, t, "max(xs)")  # type: ignore[arg-type]
    assert counting.leases == runs + 1


def test_the_check_never_ships_hidden_material(pool: SandboxPool) -> None:
    t = task_with_rival(seed=13)
    seen: list[dict] = []

    class Spy(CountingPool):
        def lease(self, files=None, **kw):
            seen.append(dict(files or {}))
            return super().lease(files, **kw)

    feedback(Spy(pool), t, "sum(xs)+1")  # type: ignore[arg-type]
    shipped = "\n".join(str(v) for files in seen for v in files.values())
    assert seen and t.hidden["io_cases.txt"] not in shipped
    assert not any(p.endswith("io_cases.txt") for files in seen for p in files)


def test_gold_scores_one_and_rivals_zero(pool: SandboxPool) -> None:
    src = registry.make("code", tier="tiny", mode="attempts", seed=2)
    scorer = Scorer(pool)
    for t in src.sample(4):
        assert scorer.score(t, src.gold(t), 0).verdict.passed
        for rival in t.metadata["consts"]["rivals"][:2]:
            assert not scorer.score(t, FinalState(answer=rival), 0).verdict.passed
        for name, final in src.negatives(t).items():
            assert not scorer.score(t, final, 0).verdict.passed, name
