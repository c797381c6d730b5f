"""RL teaches the loop: on a task whose first answer can only be a guess and whose failing case names the
answer, a few GRPO steps through the real loop (env, token record, advantages, update) raise the chance that a
second attempt recovers when the env says what failed, and not when it says only "wrong". That gain lives in
the second turn's tokens: with the update's credit cut to the first turn (a deliberately broken credit
assignment, kept here as a test) the same steps leave it where it was. So a change that drops later turns from
the token record, masks them out of the loss or gives them no advantage fails here.

The chance is computed exactly from the model, not sampled: for every answer letter and every wrong first
letter, the probability the policy gives the answer as its second attempt after the env's message."""
from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from rlvr import run
from rlvr.config import RunConfig
from rlvr.envs.feedback import Check, Failure, message
from rlvr.envs.messages import Message
from rlvr.rollout.episode import Episode
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain, VerifierKind
from rlvr.tasks.source import TaskSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.train import loop
from rlvr.train.update import Sample
from rlvr.verify.verdict import Check as VerdictCheck
from rlvr.verify.verdict import Verdict

GUESS = "loopcredit_guess"
LETTERS = "wxyz"
PROMPT = "guess"


class GuessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = 0


class GuessSource(TaskSource):
    """Task i: say the letter `Random(seed + i)` drew; the prompt does not tell which."""

    def __init__(self, cfg: GuessConfig) -> None:
        self.cfg, self.name = cfg, GUESS

    @property
    def size(self) -> None:
        return None

    def get(self, index: int) -> Task:
        letter = random.Random(self.cfg.seed + index).choice(LETTERS)
        return Task(id=f"g{index}", domain=GUESS, prompt=PROMPT, answer=letter, attempts=True,
                    limits=TaskLimits(max_turns=2, max_tokens=8), index=index, seed=self.cfg.seed)

    def gold_attempts(self, task: Task) -> list[str]:
        wrong = random.Random(task.key).choice([c for c in LETTERS if c != task.answer])
        return [wrong, str(task.answer)]


class Exact:
    def verify(self, task: Task, final: FinalState) -> Verdict:
        ok = (final.answer or "").strip() == task.answer
        return Verdict.from_checks([VerdictCheck(name="letter", score=float(ok), passed=ok)])


def check(answer: str, target: str) -> Check:
    """The failing case names the letter (what the prompt lacks)."""
    said = answer.strip()
    if said == target:
        return Check(passed=True)
    return Check(passed=False, failures=(Failure(call="guess()", expected=repr(target),
                                                 got=f"returned {said!r}"),))


@pytest.fixture(scope="module", autouse=True)
def _guess_domain():
    registry.names()
    registry.register(Domain(GUESS, GuessSource, GuessConfig,
                             feedback=lambda pool, task, answer: check(answer, str(task.answer)),
                             verifiers={GUESS: VerifierKind(lambda ctx: Exact())}))
    yield
    registry.unregister(GUESS)


def config(tmp_path: Path, model: Path, name: str, *, sft: bool, steps: int,
           feedback: str = "cases", turn_baseline: bool = False) -> RunConfig:
    return RunConfig.model_validate({
        "name": name, "output_dir": str(tmp_path), "seed": 1,
        "tasks": {"train": GUESS, "heldout": ""},
        "sandbox": {"isolation": "none"},
        "policy": {"model": str(model), "max_new_tokens": 4},
        "rollout": {"group_size": 8, "feedback": feedback},
        "sft": {"enabled": sft, "source": "gold", "examples": 400, "steps": 150, "lr": 3e-3,
                "batch_size": 16},
        "train": {"steps": steps, "batch_size": 16, "lr": 5e-3, "lr_decay": "constant", "threads": 1,
                  "checkpoint_every": 1000, "turn_baseline": turn_baseline},
        "monitor": {"tensorboard": False, "report": False, "detectors": False},
    })


@torch.no_grad()
def recovery(model_dir: Path, feedback: str) -> float:
    """The exact chance that the second attempt is the answer, over every answer and wrong first letter."""
    from rlvr.rollout.policies.hf import HFPolicy

    policy = HFPolicy(model_dir, device="cpu", threads=1)
    total, n = 0.0, 0
    for target in LETTERS:
        for wrong in (c for c in LETTERS if c != target):
            told = message(check(wrong, target), "blank" if feedback == "blank" else "cases")
            conversation = [Message(role="user", content=PROMPT), Message(role="assistant", content=wrong),
                            Message(role="user", content=told)]
            ids = policy.encode(policy.render(conversation))
            probs = torch.softmax(policy.model(torch.tensor([ids])).logits[0, -1].float(), -1)
            total += float(probs[policy.encode(target)[0]])
            n += 1
    return total / n


def first_turn_only(episodes: Sequence[Episode], advantages: dict[str, float],
                    turns: dict[str, list[float]] | None = None) -> list[Sample]:
    """The broken credit assignment: each sample keeps its loss on its first generated turn only."""
    out = []
    for s in SAMPLES_FROM(episodes, advantages, turns):
        mask, ended, started = [], False, False
        for m in s.loss_mask:
            started = started or bool(m)
            ended = ended or (started and not m)
            mask.append(0 if ended else m)
        out.append(Sample(s.token_ids, mask, s.logprobs, s.advantage, s.proximal, s.token_advantages))
    return out


SAMPLES_FROM = loop.samples_from


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny model after a brief SFT on gold trajectories (a wrong letter, the feedback, the letter)."""
    from rlvr.rollout.policies.builtin import build_tiny_model

    root = tmp_path_factory.mktemp("loopcredit")
    model = build_tiny_model(root / "init", n_layer=2, n_embd=64, n_head=2, n_positions=64, seed=3)
    run.train(config(root, model, "sft", sft=True, steps=0))
    return root, root / "sft" / "model"


STEPS = 15
"""RL steps of each run: 15 x 128 episodes raised the recovery chance by 0.13 (0.48 -> 0.61) with the
feedback, by 0.00 with it blanked, and lowered it by 0.20 with the first turn's credit only (the turn-1
updates, which cannot know the answer, disturb the shared weights the second turn reads with)."""


def test_rl_raises_the_recovery_chance_only_when_the_feedback_says_what_failed(warm) -> None:
    root, model = warm
    before, blank_before = recovery(model, "cases"), recovery(model, "blank")
    run.train(config(root, model, "cases", sft=False, steps=STEPS))
    run.train(config(root, model, "blank", sft=False, steps=STEPS, feedback="blank"))
    after = recovery(root / "cases" / "model", "cases")
    blank_after = recovery(root / "blank" / "model", "blank")
    assert after - before >= 0.08, (before, after)
    # without the letter a second answer can at best avoid the first (1 in 3): the rise stays far below
    assert blank_after - blank_before < (after - before) / 2, (blank_before, blank_after, before, after)


def test_with_credit_on_the_first_turn_only_the_recovery_chance_does_not_rise(warm, monkeypatch) -> None:
    root, model = warm
    monkeypatch.setattr(loop, "samples_from", first_turn_only)
    before = recovery(model, "cases")
    run.train(config(root, model, "first-turn", sft=False, steps=STEPS))
    after = recovery(root / "first-turn" / "model", "cases")
    assert after - before < 0.03, (before, after)


def test_with_a_baseline_per_turn_the_recovery_chance_rises_too(warm) -> None:
    # the loop quickstart's credit (`train.turn_baseline`): turn 2 against the episodes that reached it
    root, model = warm
    before = recovery(model, "cases")
    run.train(config(root, model, "per-turn", sft=False, steps=STEPS, turn_baseline=True))
    after = recovery(root / "per-turn" / "model", "cases")
    assert after - before >= 0.08, (before, after)
