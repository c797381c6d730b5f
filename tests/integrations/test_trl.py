"""The TRL adapter: datasets of rlvr prompts and rewards from rlvr verifiers, end to end in GRPOTrainer."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.integrations.trl import TASK_COLUMN, build_dataset, completion_text, load_tasks, reward_function
from rlvr.tasks.source import ListSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.verify.verdict import Verdict
from tests.kinds import register_kind


class _CrashingVerifier:
    def __init__(self, ctx: object) -> None:
        pass

    def verify(self, task: Task, final: FinalState) -> Verdict:
        raise RuntimeError("verifier lost its sandbox")


class _FlaggingVerifier:
    def __init__(self, ctx: object) -> None:
        pass

    def verify(self, task: Task, final: FinalState) -> Verdict:
        return Verdict(score=1.0, passed=False, flags=[{"kind": "tampering", "message": "edited the tests"}])


for _kind, _cls in (("test-trl-crash", _CrashingVerifier), ("test-trl-flag", _FlaggingVerifier)):
    register_kind(_kind, _cls)


def test_dataset_rows_carry_prompts_and_task_keys(answer_tasks: list[Task]) -> None:
    chat = build_dataset(answer_tasks, system_prompt="Answer inside <answer></answer>.")
    assert chat.column_names == ["prompt", TASK_COLUMN]
    assert chat[2]["prompt"] == [{"role": "system", "content": "Answer inside <answer></answer>."},
                                 {"role": "user", "content": "Reply with 2."}]
    assert chat[2][TASK_COLUMN] == "toy/t2"
    plain = build_dataset(ListSource(answer_tasks, name="toy"), conversational=False, n=3, seed=1)
    assert len(plain) == 3 and all(isinstance(p, str) for p in plain["prompt"])


def test_rewards_come_from_the_verifier(answer_tasks: list[Task]) -> None:
    reward = reward_function(answer_tasks, workers=2)
    completions = ["<answer>0</answer>",
                   [{"role": "assistant", "content": "<think>hmm</think><answer>1</answer>"}],
                   "<answer>3</answer>", "<answer>3</answer><answer>4</answer>", "", []]
    ids = ["toy/t0", "toy/t1", "toy/t2", "toy/t3", "toy/t4", "toy/t5"]
    logged: dict[str, float] = {}
    got = reward(prompts=[""] * 6, completions=completions, task_id=ids,
                 log_metric=lambda k, v: logged.__setitem__(k, v))
    assert got == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # a hedge between two answers does not count
    assert logged == {"rlvr/infra_errors": 0.0, "rlvr/pass_rate": pytest.approx(2 / 6), "rlvr/flagged": 0.0}
    assert reward.last_verdicts[0].passed and not reward.last_verdicts[2].passed


def test_infra_errors_are_none_and_flags_take_the_penalty() -> None:
    tasks = [Task(id="c", domain="toy", prompt="p", answer="x", verifier={"kind": "test-trl-crash"}),
             Task(id="f", domain="toy", prompt="p", answer="x", verifier={"kind": "test-trl-flag"})]
    reward = reward_function(tasks, flag_penalty=-0.5, workers=1)
    assert reward(prompts=["p", "p"], completions=["x", "x"], task_id=["toy/c", "toy/f"]) == [None, -0.5]
    assert "crashed" in (reward.last_verdicts[0].infra_error or "")


def test_bad_inputs_are_user_errors(answer_tasks: list[Task]) -> None:
    reward = reward_function(answer_tasks)
    with pytest.raises(UserError, match="no 'task_id' column"):
        reward(prompts=["p"], completions=["x"])
    with pytest.raises(UserError, match="unknown task 'toy/t99'"):
        reward(prompts=["p"], completions=["x"], task_id=["toy/t99"])
    multi = Task(id="m", domain="toy", prompt="p", limits=TaskLimits(max_turns=4))
    with pytest.raises(UserError, match="multi-turn"):
        load_tasks([multi])
    with pytest.raises(UserError, match="appears twice"):
        load_tasks([answer_tasks[0], answer_tasks[0]])
    with pytest.raises(UserError, match="no tasks"):
        load_tasks([])
    with pytest.raises(UserError, match="not from a list"):
        load_tasks(answer_tasks, n=2)
    with pytest.raises(UserError, match="tasks SPEC only"):
        load_tasks(answer_tasks, settings={"toy": {"tier": "tiny"}})
    with pytest.raises(UserError, match="TaskSource"):
        load_tasks(["not a task"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="unsupported completion"):
        completion_text(42)


def test_grpo_trainer_trains_with_rlvr_rewards(answer_tasks: list[Task], tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.rollout.policies.builtin import build_tiny_model

    torch.set_num_threads(1)
    path = build_tiny_model(tmp_path / "model", n_layer=1, n_embd=32, n_head=2, n_positions=128, seed=0)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    reward = reward_function(answer_tasks, workers=1)
    seen: list[tuple[str, str]] = []

    def rlvr_reward(prompts: list, completions: list, **kwargs: object) -> list[float | None]:
        ids = kwargs[TASK_COLUMN]
        seen.extend(zip([p[-1]["content"] for p in prompts], ids, strict=True))  # type: ignore[arg-type]
        return reward(prompts, completions, **kwargs)

    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=6, max_steps=2, learning_rate=1e-3, logging_steps=1, use_cpu=True,
                      bf16=False, activation_checkpointing=False, report_to="none", save_strategy="no",
                      disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=rlvr_reward, args=args,
                          train_dataset=build_dataset(answer_tasks),
                          processing_class=tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    by_prompt = {t.prompt: t.key for t in answer_tasks}
    assert len(seen) == 2 * 4 and all(by_prompt[p] == k for p, k in seen)  # each reward judged its own task
    logs = [h for h in trainer.state.log_history if "rlvr/pass_rate" in h]
    assert logs and all(0.0 <= h["rlvr/pass_rate"] <= 1.0 for h in logs)
    assert len(reward.last_verdicts) == 4
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    informative = any(h["reward_std"] > 0 for h in trainer.state.log_history if "reward_std" in h)
    assert changed == informative  # equal rewards in every group give zero advantage, hence no update


def test_a_real_domain_scores_its_gold_answer_1_and_its_empty_control_0() -> None:
    from rlvr.tasks import registry

    source = registry.make("code", tier="tiny")
    tasks = load_tasks(source, n=1, seed=3)
    task = tasks[0]
    gold, empty = source.gold(task), source.negatives(task)["empty_answer"]
    assert gold is not None and gold.answer is not None and empty.answer is not None
    reward = reward_function(tasks)
    got = reward(prompts=["", ""], completions=[gold.answer, empty.answer], task_id=[task.key, task.key])
    assert got == [1.0, 0.0]
    assert reward.last_verdicts[0].passed and not reward.last_verdicts[1].passed
    prompts = build_dataset(source, conversational=False, n=1, seed=3)
    assert prompts["prompt"] == [t.prompt for t in tasks] and prompts[TASK_COLUMN] == [t.key for t in tasks]
    from_spec = load_tasks("code:3", settings={"code": {"tier": "tiny"}})
    assert [t.tier for t in from_spec] == ["tiny"] * 3 and len({t.key for t in from_spec}) == 3
