"""TRL's `environment_factory`: rlvr's tools as methods of the class GRPOTrainer instantiates, rlvr's verdicts
as rewards, end to end in a real GRPOTrainer run on CPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.envs.tools import TOOLS
from rlvr.errors import UserError
from rlvr.integrations.trl import TASK_COLUMN, RlvrToolEnv, dataset, environment_factory
from tests.conftest import ADD_SOLUTION
from tests.integrations.servers import write_add_pack

WRONG = "def add(a, b):\n    return a - b\n"


def test_the_class_is_what_grpotrainer_expects(tmp_path: Path) -> None:
    from transformers.utils import get_json_schema

    Env = environment_factory(str(write_add_pack(tmp_path / "pack")))
    rows = dataset(Env)
    assert rows.column_names == ["prompt", TASK_COLUMN] and rows[TASK_COLUMN] == ["code/add", "code/add2"]
    assert rows[0]["prompt"] == [{"role": "user", "content": ""}]  # reset appends the task's prompt here
    tools = {name: get_json_schema(getattr(Env, name)) for name in dir(Env)
             if not name.startswith("_") and callable(getattr(Env, name))
             and name not in ("reset", "get_reward")}
    assert set(tools) == set(TOOLS)
    assert tools["write_file"]["function"]["parameters"]["required"] == ["path", "content"]
    env = Env()
    try:
        assert env.reset(**rows[0]) == "Write add(a, b)."
        assert "add.py" in env.list_files()
        assert env.write_file("add.py", ADD_SOLUTION["add.py"]).startswith("wrote add.py")
        assert "1 passed" in env.run_tests() and "[ok" in env.run("python -c 'print(6*7)'")
        assert env.read_file("nope.py").startswith("error:")
        assert env.submit() == "submitted"
        assert env.get_reward() == 1.0 and env.last_scored is not None and env.last_scored.verdict.passed
        assert env.reset(**rows[1]) == "Write add(a, b)."
        assert env.get_reward() == 0.0  # nothing done: the stub fails the hidden tests
    finally:
        Env.runtime.close()
    with pytest.raises(UserError, match="unknown task"):
        env.reset(task_id="code/missing")


def _scripted(model_cls, tokenizer, scripts):  # type: ignore[no-untyped-def]
    """The tiny model with constrained decoding: each turn's tokens are forced to a scripted tool call (the
    weights still give every log-prob GRPO trains on). Turn 1 writes the right `add` on even rows and a wrong
    one on odd rows, turn 2 submits, turn 3 ends."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class Force(LogitsProcessor):
        def __init__(self) -> None:
            self.start: int | None = None
            self.plans: list[list[int]] = []

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            if self.start is None:
                self.start = input_ids.shape[1]
                for row in range(input_ids.shape[0]):
                    prompt = tokenizer.decode(input_ids[row], skip_special_tokens=False)
                    turn = prompt.count("<tool_response>")
                    text = scripts[row % 2] if turn == 0 else scripts[2] if turn == 1 else ""
                    self.plans.append(tokenizer.encode(text,
                                                       add_special_tokens=False) + [tokenizer.eos_token_id])
            k = input_ids.shape[1] - self.start
            forced = torch.full_like(scores, float("-inf"))
            for row, plan in enumerate(self.plans):
                forced[row, plan[min(k, len(plan) - 1)]] = 0.0
            return forced

    class Scripted(model_cls):  # type: ignore[misc, valid-type]
        def generate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            kwargs["logits_processor"] = LogitsProcessorList([Force()])
            return super().generate(*args, **kwargs)

    return Scripted


@pytest.mark.integrations
def test_grpo_trainer_trains_on_tool_episodes_scored_by_rlvr(tmp_path: Path) -> None:
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import add_response_schema

    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.tasks.spec import FinalState
    from rlvr.verify.base import VerifyContext, verify

    torch.set_num_threads(1)
    path = build_tiny_model(tmp_path / "model", n_layer=1, n_embd=32, n_head=2, n_positions=4096, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer = add_response_schema(tokenizer)  # TRL's tool-call parser for this template

    def call(name: str, **arguments: str) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"

    scripts = [call("write_file", path="add.py", content=ADD_SOLUTION["add.py"]),
               call("write_file", path="add.py", content=WRONG), call("submit")]
    base = AutoModelForCausalLM.from_pretrained(path)
    model = _scripted(type(base), tokenizer, scripts).from_pretrained(path)
    Env = environment_factory(str(write_add_pack(tmp_path / "pack")), max_turns=4)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=400, max_tool_calling_iterations=3, max_steps=2,
                      learning_rate=1e-2,
                      logging_steps=1, use_cpu=True, bf16=False, activation_checkpointing=False,
                      report_to="none",
                      save_strategy="no", disable_tqdm=True, seed=0, shuffle_dataset=False)
    trainer = GRPOTrainer(model=model, args=args, train_dataset=dataset(Env), processing_class=tokenizer,
                          environment_factory=Env)
    before = [p.detach().clone() for p in model.parameters()]
    try:
        trainer.train()
        assert trainer.state.global_step == 2
        envs: list[RlvrToolEnv] = trainer._environment_pool[None]
        assert len(envs) == 4 and all(e.last_scored is not None for e in envs)
        for i, env in enumerate(envs):
            scored = env.last_scored
            assert scored is not None and scored.verdict.passed == (i % 2 == 0), (i, scored.verdict)
            # the reward is rlvr's verdict on the files the tools wrote in the sandbox
            task = env._session.task
            assert task is not None
            written = ADD_SOLUTION["add.py"] if i % 2 == 0 else WRONG
            expect = verify(task, FinalState(files={**task.workspace, "add.py": written}), VerifyContext())
            assert scored.reward == expect.score
        logged = [h["rewards/RlvrEnv/mean"] for h in trainer.state.log_history if "rewards/RlvrEnv/mean" in h]
        assert logged == [0.5, 0.5]
        tools = [h for h in trainer.state.log_history if "tools/call_frequency" in h]
        assert tools and all(h["tools/failure_frequency"] == 0.0 for h in tools)
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
        assert Env.runtime.pool.base.joinpath("leases").exists() and not any(
            Env.runtime.pool.base.joinpath("leases").iterdir())  # every rollout gave its sandbox back
    finally:
        Env.runtime.close()
