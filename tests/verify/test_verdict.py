"""The Verdict record: a flagged verdict's score is never a trick's reward."""
from __future__ import annotations

from rlvr.verify.verdict import Check, Evidence, Flag, Verdict

DONE = [Check(name="t1", score=1.0, passed=True), Check(name="t2", score=1.0, passed=True)]


def test_a_flag_whose_act_may_have_worked_leaves_no_score() -> None:
    watched = Flag(kind="special_casing", evidence=[Evidence(seen="read the caller's frame")])
    assert Verdict(score=1.0, checks=DONE, flags=[watched]).score == 0.0
    assert Verdict.from_checks(DONE, [watched]).score == 0.0
    assert Verdict(score=0.7, flags=[Flag(kind="parroting")]).score == 0.0  # no evidence: nothing neutralised
    # read back from a record, the same holds
    assert Verdict.model_validate({"score": 1.0, "flags": [{"kind": "tampering"}]}).score == 0.0


def test_a_trick_made_inert_keeps_what_the_work_earns() -> None:
    inert = Flag(kind="tampering", evidence=[Evidence(seen="planted bytecode", inert=True)])
    v = Verdict(score=0.75, flags=[inert])
    assert v.score == 0.75 and inert.neutralised and not v.passed
    assert v.reward(flag_penalty=-0.5) == -0.5  # the reward is the penalty all the same
    mixed = Flag(kind="tampering", evidence=[Evidence(seen="a", inert=True), Evidence(seen="b")])
    assert Verdict(score=0.75, flags=[mixed]).score == 0.0
    assert Verdict(score=0.75, flags=[inert, Flag(kind="exit_trick")]).score == 0.0


def test_unflagged_scores_are_untouched() -> None:
    assert Verdict(score=0.4).score == 0.4
    assert Verdict.from_checks([Check(name="a", score=0.5)]).score == 0.5
