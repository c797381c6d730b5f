"""The rollout engine: groups, multi-turn episodes, exact token records, truncation, infra retry and
masking."""
from __future__ import annotations

import json
from typing import ClassVar

from rlvr.config import RolloutConfig
from rlvr.envs.env import Env
from rlvr.rollout.core.rollouts import episode_seed
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.episode import TOKEN_BUDGET, Episode
from rlvr.rollout.policies.hf import HFPolicy, sequence_logprobs
from rlvr.rollout.policies.scripted import Script, ScriptedPolicy
from rlvr.rollout.policy import Completion, SamplingParams
from rlvr.tasks.spec import Task, TaskLimits
from tests.envs.conftest import FlakyPool
from tests.kinds import register_kind

WS = {"sol.py": "def add(a, b):\n    return a - b\n",
      "test_sol.py": "from sol import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"}
FIX = "--- a/sol.py\n+++ b/sol.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"


def tc(name: str, **args) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def multi(tid: str = "fix", kind: str = "test-rollout-file", **limits) -> Task:
    return Task(id=tid, domain="toy", prompt=f"Fix add in sol.py ({tid})", workspace=WS,
                verifier={"kind": kind},
                limits=TaskLimits(**{"max_turns": 6, "max_tokens": 4000, **limits}))


def single(tid: str = "q") -> Task:
    return Task(id=tid, domain="toy", prompt="What is 6 * 7?", verifier={"kind": "test-rollout-file"},
                limits=TaskLimits(max_tokens=40))


SOLVER = Script.model_validate({"default": [tc("read_file", path="sol.py"), tc("apply_patch", patch=FIX),
                                            tc("submit")],
                                "match": [{"prompt_contains": "6 * 7", "turns": ["42"]},
                                          {"prompt_contains": "(lazy)", "turns": ["I am done."] * 10}]})


def aligned(ep: Episode) -> bool:
    return len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)


def test_scripted_groups_multi_and_single_turn(pool) -> None:
    eng = EnvRollouts(ScriptedPolicy(SOLVER), pool, config=RolloutConfig(tool_workers=2))
    eps = eng.run([multi(), single()], group_size=3, step=7, seed=5)
    assert [(e.task_id, e.sample_index) for e in eps] == [("fix", 0), ("fix", 1), ("fix", 2), ("q", 0),
                                                          ("q", 1), ("q", 2)]
    assert len({e.group_id for e in eps[:3]}) == 1 and eps[0].group_id != eps[3].group_id
    assert all(e.status == "done" and e.reward == 1.0 and e.passed and e.step == 7 for e in eps)
    assert eps[0].seed == episode_seed(5, "toy/fix", 0) and len({e.seed for e in eps}) == 6
    fix = eps[0]
    assert fix.num_turns == 3 and [m.role for m in fix.messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    assert fix.final_state.files["sol.py"].endswith("return a + b\n")
    assert set(fix.timings) >= {"generate", "tools", "verify", "total"} and fix.timings["tools"] > 0
    assert fix.timings["total"] >= fix.timings["tools"] + fix.timings["verify"]
    assert eps[3].final_state.answer == "42" and eps[3].num_turns == 1
    assert 0.0 <= eng.stats.idle_fraction <= 1.0 and eng.stats.episodes == 6
    assert all(aligned(e) and e.token_ids == [] for e in eps)  # the script has no tokenizer


def test_turn_budget_is_truncation_and_still_verified(pool) -> None:
    eng = EnvRollouts(ScriptedPolicy(SOLVER), pool, config=RolloutConfig(max_turns=2))
    [ep] = eng.run([multi("lazy-(lazy)")], 1)
    assert ep.status == "truncated" and ep.truncated_by == "turns" and ep.num_turns == 2
    assert ep.verdict is not None and ep.reward == 0.0 and not ep.masked


def test_token_budget_truncates(pool) -> None:
    eng = EnvRollouts(ScriptedPolicy(SOLVER), pool)
    [ep] = eng.run([multi("lazy-(lazy)", max_tokens=25)], 1)
    assert ep.status == "truncated" and ep.truncated_by == "tokens" and ep.num_generated_tokens == 25
    assert ep.metadata[TOKEN_BUDGET] == 25  # what the overlong penalty ramps towards (rlvr.train.truncation)
    turns = EnvRollouts(ScriptedPolicy(SOLVER), pool, config=RolloutConfig(max_turns=2),
                        sampling=SamplingParams(max_new_tokens=40)).run([multi("lazy-(lazy)")], 1)[0]
    assert turns.metadata[TOKEN_BUDGET] == 80  # two turns of at most 40 tokens each


def test_hf_records_are_exact(tiny, pool) -> None:
    eng = EnvRollouts(tiny, pool, config=RolloutConfig(max_turns=3),
                        sampling=SamplingParams(temperature=1.0, max_new_tokens=24))
    eps = eng.run([multi(max_tokens=200), single()], group_size=2, seed=1)
    for ep in eps:
        assert aligned(ep) and ep.status in ("done", "truncated") and not ep.masked
        assert sum(ep.loss_mask) == ep.num_generated_tokens > 0
        ref = sequence_logprobs(tiny.model, ep.token_ids)
        gen = [(r, lp) for r, lp, m in zip(ref, ep.logprobs, ep.loss_mask) if m]
        assert max(abs(r - lp) for r, lp in gen) < 1e-4
        assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.loss_mask) if not m)
    multi_ep = eps[0]
    assert multi_ep.num_turns >= 2 and tiny.tokenizer.decode(multi_ep.token_ids).startswith("<|system|>")
    again = eng.run([single(), multi(max_tokens=200)], group_size=2, seed=1)
    assert [e.token_ids for e in again[2:]] + [e.token_ids for e in again[:2]] == [e.token_ids for e in eps]


class Forced(HFPolicy):
    """The tiny model made to say given turns (teacher-forced), with the model's log-probs of those tokens."""

    def generate(self, conversations, params, *, prompt_token_ids=None):
        out = []
        for conv, prompt in zip(conversations, prompt_token_ids):
            n = sum(m.role == "assistant" for m in conv)
            ids = self.encode(self.turns[min(n, len(self.turns) - 1)]) + [self.tokenizer.eos_token_id]
            lps = sequence_logprobs(self.model, prompt + ids)[len(prompt):]
            out.append(Completion(text=self.decode(ids), token_ids=ids, logprobs=lps,
                                  prompt_token_ids=prompt))
        return out


def forced(tiny, turns, max_context):
    f = Forced.__new__(Forced)
    f.__dict__.update(tiny.__dict__)
    f.turns, f.max_context = turns, max_context
    return f


def test_context_elision_keeps_records_exact(tiny, pool) -> None:
    task = Task(id="big", domain="toy", prompt="go", workspace={"big.txt": "z" * 300},
                verifier={"kind": "test-rollout-file"}, limits=TaskLimits(max_turns=6, max_tokens=2000))
    base = len(tiny.encode(tiny.render(Env(pool).reset(task).messages)))
    policy = forced(tiny, [tc("read_file", path="big.txt")] * 3 + [tc("submit")], base + 800)
    eng = EnvRollouts(policy, pool, sampling=SamplingParams(max_new_tokens=80))
    [ep] = eng.run([task], 1)
    # turns 3 and 4 each outgrow the context: the oldest full tool output is elided each time
    assert ep.status == "done" and ep.context_elided and ep.metadata["token_restarts"] == 2
    assert [m.elided for m in ep.messages if m.role == "tool"] == [True, True, False, False]
    assert ep.metadata["elided_originals"] == {"3": "z" * 300, "5": "z" * 300}
    assert aligned(ep) and len(ep.token_ids) <= base + 800
    ref = sequence_logprobs(tiny.model, ep.token_ids)
    assert max(abs(r - lp) for r, lp, m in zip(ref, ep.logprobs, ep.loss_mask) if m) < 1e-4
    assert sum(ep.loss_mask) < ep.num_generated_tokens  # turns before the elision keep loss_mask 0


def test_context_too_small_truncates_without_overflow(tiny, pool) -> None:
    task = Task(id="chatty", domain="toy", prompt="go", workspace={"big.txt": "z" * 120},
                verifier={"kind": "test-rollout-file"}, limits=TaskLimits(max_turns=4, max_tokens=400))
    policy = forced(tiny, [tc("read_file", path="big.txt")], 200)  # the system prompt alone outgrows it
    [ep] = EnvRollouts(policy, pool, sampling=SamplingParams(max_new_tokens=8)).run([task], 1)
    assert ep.status == "truncated" and ep.truncated_by == "context" and ep.num_turns == 0
    assert ep.verdict is not None and not ep.masked


def test_dead_sandbox_mid_episode_is_retried(pool) -> None:
    flaky = FlakyPool(dead_leases=1, die_after=0)
    eng = EnvRollouts(ScriptedPolicy(Script.model_validate(
        {"default": [tc("run", command="echo x > y.txt"), tc("apply_patch", patch=FIX), tc("submit")]})),
        flaky, config=RolloutConfig(infra_retries=1))
    [ep] = eng.run([multi()], 1)
    assert ep.status == "done" and ep.reward == 1.0 and ep.infra_retries == 1
    assert ep.final_state.files["y.txt"] == "x\n"


def test_sandbox_that_stays_dead_masks_the_episode_and_keeps_it() -> None:
    eng = EnvRollouts(ScriptedPolicy(SOLVER), FlakyPool(dead_leases=99),
                      config=RolloutConfig(infra_retries=1))
    script = Script.model_validate({"default": [tc("read_file", path="sol.py"), tc("run", command="true"),
                                                tc("submit")]})
    eng.policy = ScriptedPolicy(script)
    eps = eng.run([multi()], 2)
    for ep in eps:
        assert ep.status == "infra_error" and ep.masked and ep.reward == 0.0
        assert "InfraError" in ep.metadata["error"] and ep.infra_retries == 1
        assert [m.role for m in ep.messages][-2:] == ["tool", "assistant"]  # the transcript is kept


def test_verifier_infra_error_retried_then_masked(pool) -> None:
    eng = EnvRollouts(ScriptedPolicy(SOLVER), pool, config=RolloutConfig(infra_retries=1))
    once = multi("flaky-once", kind="test-rollout-flaky").model_copy(update={"metadata": {"fail": 1}})
    always = multi("flaky-always", kind="test-rollout-flaky").model_copy(update={"metadata": {"fail": 99}})
    a, b = eng.run([once, always], 1)
    assert a.status == "done" and a.reward == 1.0 and a.infra_retries == 1
    assert b.status == "infra_error" and b.masked and b.verdict.infra_error == "judge unavailable"


class Failing:
    """A backend whose requests fail the first `fail` times."""

    version = 3

    def __init__(self, fail: int) -> None:
        self.fail = fail

    def generate(self, conversations, params, **kw):
        if self.fail > 0:
            self.fail -= 1
            return [Completion(text="", finish_reason="error", error="503") for _ in conversations]
        return [Completion(text="42", token_ids=[1, 2], logprobs=[-0.1, -0.2]) for _ in conversations]


def test_backend_faults_are_retried_then_masked(pool) -> None:
    [ok] = EnvRollouts(Failing(1), pool, config=RolloutConfig(infra_retries=1)).run([single()], 1)
    assert ok.status == "done" and ok.reward == 1.0 and ok.infra_retries == 1 and ok.policy_version == 3
    [bad] = EnvRollouts(Failing(5), pool, config=RolloutConfig(infra_retries=1)).run([single()], 1)
    assert bad.status == "infra_error" and "503" in bad.metadata["error"]


class Raising:
    version = 0

    def generate(self, conversations, params, **kw):
        raise RuntimeError("device lost")


def test_a_crashing_backend_never_loses_episodes(pool) -> None:
    eps = EnvRollouts(Raising(), pool, config=RolloutConfig(infra_retries=0)).run([single(), multi()], 2)
    assert len(eps) == 4 and all(e.status == "infra_error" and "device lost" in e.metadata["error"]
                                 for e in eps)


def test_lease_failures_are_retried_then_masked() -> None:
    from tests.envs.test_env import NoLease

    pool = NoLease()
    eps = EnvRollouts(ScriptedPolicy(SOLVER), pool, config=RolloutConfig(infra_retries=2)).run([multi()], 2)
    assert pool.calls == 6 and all(e.status == "infra_error" and e.infra_retries == 2 for e in eps)
    assert all("cannot lease" in e.metadata["error"] for e in eps)


class Short:
    version = 0

    def generate(self, conversations, params, **kw):
        return [Completion(text="42")]  # one completion, whatever the batch


def test_a_backend_that_drops_completions_loses_no_episode(pool) -> None:
    eps = EnvRollouts(Short(), pool, config=RolloutConfig(infra_retries=0)).run([single()], 3)
    assert [e.status for e in eps] == ["infra_error"] * 3 and "3 conversations" in eps[0].metadata["error"]


def test_a_task_listed_twice_gets_two_groups(pool) -> None:
    eps = EnvRollouts(ScriptedPolicy(SOLVER), pool).run([single(), single()], 2, seed=3)
    assert len({e.group_id for e in eps}) == 2 and len({e.seed for e in eps}) == 4
    assert [e.seed for e in eps] == [episode_seed(3, "toy/q", i) for i in range(4)]


def test_a_stalled_rollout_is_an_error_naming_the_stuck_phase(pool) -> None:
    """The watchdog: work that never returns ends the rollout with a clear error, never a silent hang."""
    import threading
    from contextlib import contextmanager

    import pytest

    from rlvr.errors import Stalled

    gate = threading.Event()

    class Stuck:
        """A pool whose leases never open (until the test lets them)."""

        limits = pool.limits

        @contextmanager
        def lease(self, files=None):
            gate.wait(30)
            with pool.lease(files) as sb:
                yield sb

        def run(self, *a, **kw):
            return pool.run(*a, **kw)

        def close(self):
            pass

    eng = EnvRollouts(ScriptedPolicy(SOLVER), Stuck(),
                      config=RolloutConfig(stall_timeout_s=0.3, tool_workers=2))
    try:
        with pytest.raises(Stalled,
                           match=r"no episode progressed for 0 s.*2 in sandbox lease and reset.*1 in waiting "
                                 r"for a tool thread"):
            eng.run([multi()], group_size=3)
    finally:
        gate.set()



class Drawn:
    """Passes "42" on a seeded draw of cases: the verdict records the seed it drew from (fresh inputs in
    miniature)."""

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        self.ctx = ctx

    def verify(self, task, final):  # type: ignore[no-untyped-def]
        from rlvr.verify import Verdict
        ok = final.answer == "42"
        return Verdict(score=float(ok), passed=ok, seed=self.ctx.seed, details={"cases": self.ctx.seed % 97})


register_kind("test-rollout-drawn", Drawn)


def test_a_group_is_verified_with_one_seed_and_its_identical_answers_once(pool) -> None:
    from rlvr.rollout.core.rollouts import verify_seed
    from rlvr.verify.scorer import Scorer

    class Seeds(Scorer):
        seen: ClassVar[list[int]] = []

        def _verify_once(self, task, final, seed):  # type: ignore[no-untyped-def]
            self.seen.append(seed)
            return super()._verify_once(task, final, seed)

    def drawn(tid: str) -> Task:
        return single(tid).model_copy(update={"verifier": {"kind": "test-rollout-drawn"}})

    scorer = Seeds(pool)
    eng = EnvRollouts(ScriptedPolicy(SOLVER), pool, scorer, config=RolloutConfig(tool_workers=3))
    eps = eng.run([drawn("q"), drawn("q2"), drawn("q")], group_size=4, step=1, seed=5)
    assert len({e.seed for e in eps}) == 12  # sampling seeds stay the episode's own
    # one verification per group (every sample answered "42"), with the group's seed: a task listed twice is a
    # second group with a seed of its own
    assert sorted(scorer.seen) == sorted([verify_seed(5, "toy/q", 0), verify_seed(5, "toy/q2", 0),
                                          verify_seed(5, "toy/q", 1)])
    assert sum(bool(e.metadata.get("verdict_cached")) for e in eps) == 9
    for group in (eps[0:4], eps[4:8], eps[8:12]):
        assert len({e.verdict.seed for e in group}) == 1 and len({e.verdict.details["cases"]
                                                                  for e in group}) == 1
    assert all(e.passed and e.reward == 1.0 for e in eps)
