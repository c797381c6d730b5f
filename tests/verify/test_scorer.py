"""The Scorer: one seam from a final state to a verdict and a reward (retries, cache, dispatch, penalty)."""
from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from rlvr.sandbox.fake import FakePool
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify import Check, Flag, Verdict
from rlvr.verify.scorer import RemoteVerifier, Scorer, VerdictCache
from tests.kinds import register_kind


class Recording:
    """Counts calls per task; the answer "ok" passes, "flag" is flagged, "down" cannot be judged `fail` times;
    "dice" draws its score from the seed it is given (randomised hidden cases in miniature)."""

    calls: ClassVar[dict[str, int]] = {}
    lock = threading.Lock()

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        with self.lock:
            n = Recording.calls[task.id] = Recording.calls.get(task.id, 0) + 1
        answer = final.answer or ""
        if answer == "down" and n <= int(task.metadata.get("fail", 0)):
            return Verdict.infra("judge unavailable")
        if answer == "dice":
            score = random.Random(self.ctx.seed).random()
            return Verdict(score=score, passed=score > 0.5, seed=self.ctx.seed,
                           details={"preview": self.ctx.extras.get("preview_dir")})
        flags = [Flag(kind="parroting", message="echo")] if answer == "flag" else []
        ok = answer in ("ok", "down", "flag")
        return Verdict.from_checks([Check(name="ok", score=float(ok), passed=ok)], flags)


register_kind("test-scorer", Recording)


def task(name: str, **metadata: Any) -> Task:
    return Task(id=name, domain="toy", prompt="p", verifier={"kind": "test-scorer"}, metadata=metadata)


def calls(t: Task) -> int:
    return Recording.calls.get(t.id, 0)


def test_identical_final_states_are_verified_once() -> None:
    t, scorer = task("cache-1"), Scorer(FakePool())
    first = scorer.score(t, FinalState(answer="ok"), seed=1)
    # a deterministic verdict is the same for any seed
    again = scorer.score(t, FinalState(answer="ok"), seed=2)
    other = scorer.score(t, FinalState(answer="no"), seed=1)
    assert calls(t) == 2 and not first.cached and again.cached and not other.cached
    assert again.verdict == first.verdict and again.reward == first.reward == 1.0 and other.reward == 0.0
    assert Scorer(FakePool(), cache=False).score(t, FinalState(answer="ok")).attempts == 1 and calls(t) == 3


def test_verdicts_that_drew_randomness_are_cached_per_seed_and_replay_exactly() -> None:
    t, scorer = task("cache-dice"), Scorer(FakePool())
    a = scorer.score(t, FinalState(answer="dice"), seed=7)
    b = scorer.score(t, FinalState(answer="dice"), seed=8)
    assert calls(t) == 2 and a.verdict.score != b.verdict.score
    assert scorer.score(t, FinalState(answer="dice"), seed=7).cached
    fresh = Scorer(FakePool(), cache=False).score(t, FinalState(answer="dice"), seed=7)
    assert fresh.verdict.score == a.verdict.score and fresh.verdict.seed == 7


def test_infra_errors_are_retried_then_returned_and_never_cached() -> None:
    flaky = task("retry-1", fail=1)
    got = Scorer(FakePool(), retries=1).score(flaky, FinalState(answer="down"))
    assert got.attempts == 2 and got.infra_error is None and got.reward == 1.0
    down = task("retry-2", fail=5)
    scorer = Scorer(FakePool(), retries=2)
    lost = scorer.score(down, FinalState(answer="down"))
    assert lost.attempts == 3 and lost.infra_error == "judge unavailable" and lost.reward == 0.0
    # asked again, not answered from the cache
    assert not scorer.score(down, FinalState(answer="down")).cached
    with pytest.raises(ValueError):
        Scorer(retries=-1)


def test_the_flag_penalty_is_the_reward_of_a_flagged_verdict() -> None:
    t = task("penalty")
    assert Scorer(FakePool(), flag_penalty=-0.5).score(t, FinalState(answer="flag")).reward == -0.5
    assert Scorer(FakePool()).score(t, FinalState(answer="flag")).reward == 0.0


class Remote(FakePool, RemoteVerifier):
    """A pool that declares it verifies on its own nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, int, dict]] = []

    def verify_remote(self, task: Task, final: FinalState, seed: int, extras: Mapping[str, Any]) -> Verdict:
        self.asked.append((task.id, seed, dict(extras)))
        return Verdict(score=1.0, passed=True, details={"where": "remote"})


class LooksRemote(FakePool):
    """Has the method, never declared the capability: the Scorer must not call it."""

    def verify_remote(self, *a: Any) -> Verdict:
        raise AssertionError("probed by name")


def test_dispatch_is_an_explicit_capability_of_the_pool_and_carries_seed_and_extras() -> None:
    pool = Remote()
    got = Scorer(pool, extras={"preview_dir": "/tmp/p"}).score(task("remote"), FinalState(answer="x"), seed=9)
    assert got.verdict.details == {"where": "remote"} and pool.asked == [("remote", 9,
                                                                          {"preview_dir": "/tmp/p"})]
    local = Scorer(LooksRemote(), extras={"preview_dir": "/tmp/q"}).score(task("local"),
                                                                          FinalState(answer="dice"), 3)
    assert local.verdict.details == {"preview": "/tmp/q"} and local.verdict.seed == 3


def test_the_cache_is_safe_across_threads() -> None:
    cache, t = VerdictCache(), task("threads")
    v = Verdict(score=1.0, passed=True)

    def work(i: int) -> None:
        cache.put(t, FinalState(answer=str(i % 5)), 0, v)
        cache.get(t, FinalState(answer=str(i % 7)), 0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(40)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(cache) == 5 and cache.hits + cache.misses == 40


class Slow(Recording):
    """Recording, slowly: verifications of one state overlap unless the Scorer makes them wait for each
    other."""

    def verify(self, task: Task, final: FinalState) -> Verdict:
        import time
        time.sleep(0.05)
        return super().verify(task, final)


register_kind("test-scorer-slow", Slow)


def test_a_state_being_verified_is_waited_for_not_verified_again() -> None:
    t = Task(id="inflight", domain="toy", prompt="p", verifier={"kind": "test-scorer-slow"})
    scorer, out = Scorer(FakePool()), []

    def work(i: int) -> None:
        out.append(scorer.score(t, FinalState(answer="dice" if i % 2 else "ok"), seed=4))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert calls(t) == 2 and sum(not s.cached for s in out) == 2 and len(out) == 12
    assert len({s.verdict.score for s in out if s.verdict.seed == 4}) == 1


def test_callers_waiting_on_an_infra_error_verify_for_themselves() -> None:
    t = Task(id="inflight-down", domain="toy", prompt="p", verifier={"kind": "test-scorer-slow"},
             metadata={"fail": 1})
    scorer, out = Scorer(FakePool(), retries=0), []
    threads = [threading.Thread(target=lambda: out.append(scorer.score(t, FinalState(answer="down"), 0)))
               for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # the first verification failed (not cached); one waiter verified again and passed; the last took its
    # verdict
    assert calls(t) == 2 and sorted(s.infra_error is None for s in out) == [False, True, True]


def test_a_verification_that_raises_releases_its_waiters() -> None:
    class Boom(Scorer):
        def _verify_once(self, task: Task, final: FinalState, seed: int) -> Verdict:
            raise RuntimeError("verifier crashed")

    scorer, t = Boom(FakePool()), task("raises")
    for _ in range(2):  # a claim left behind would make the second call wait for ever
        with pytest.raises(RuntimeError):
            scorer.score(t, FinalState(answer="ok"), 0)


def test_the_cache_keeps_the_most_recently_used_verdicts() -> None:
    cache, t = VerdictCache(max_entries=3), task("lru")
    v = Verdict(score=1.0, passed=True)
    for a in "abc":
        cache.put(t, FinalState(answer=a), 0, v)
    assert cache.get(t, FinalState(answer="a"), 0) is v  # a is now the most recent
    cache.put(t, FinalState(answer="d"), 0, v)
    assert len(cache) == 3 and cache.get(t, FinalState(answer="b"), 0) is None
    assert all(cache.get(t, FinalState(answer=a), 0) is v for a in "acd")
    with pytest.raises(ValueError, match="max_entries"):
        VerdictCache(max_entries=0)
