"""Gold trajectories: a reference played through the real env (the tests fail before the fix and pass after),
the trained policy's token record, recovery samples from failed episodes, and the chat dataset."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.config import RolloutConfig
from rlvr.envs.messages import Message
from rlvr.rollout.core.runner import EnvRollouts
from rlvr.rollout.episode import Episode
from rlvr.rollout.policies.gold import GoldPlan, plan_for, play, recovery_plan, tool_call_text, unmask_prefix
from rlvr.rollout.policy import SamplingParams
from rlvr.tasks import registry
from rlvr.tasks.spec import FinalState, TaskLimits
from rlvr.verify.scorer import Scorer

GOLD = SamplingParams(temperature=0.0, max_new_tokens=1 << 20)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """The tiny model with room for a whole tool episode (its byte-level tokens are many)."""
    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.rollout.policies.hf import HFPolicy

    path = build_tiny_model(tmp_path_factory.mktemp("wide"), n_layer=1, n_embd=32, n_head=2, n_positions=8192,
                            seed=3)
    return HFPolicy(path, device="cpu", threads=1)


def _engine(pool):
    return lambda policy: EnvRollouts(policy, pool, Scorer(pool), config=RolloutConfig(), sampling=GOLD)


def _tools(ep: Episode) -> list[tuple[str | None, str | None]]:
    return [(m.name, m.exec_status) for m in ep.messages if m.role == "tool"]


def test_a_multi_turn_reference_becomes_tests_failing_then_passing_then_submit(pool) -> None:
    tasks = registry.make("code", tier="easy").sample(3, seed=1) + registry.make("repo").sample(2, seed=1)
    episodes = play([plan_for(t) for t in tasks], _engine(pool))
    assert len(episodes) == len(tasks)
    for ep in episodes:
        runs = [status for name, status in _tools(ep) if name == "run_tests"]
        assert runs == ["exit_nonzero", "ok"], (ep.task_id, _tools(ep))  # real outputs: red, then green
        assert _tools(ep)[-1] == ("submit", None) and ep.passed and ep.status == "done"
        said = [m.content for m in ep.messages if m.role == "assistant"]
        assert said[1].startswith("The tests fail.") and said[2].startswith("The tests pass now.")


def test_a_short_turn_budget_merges_the_last_stages() -> None:
    task = registry.make("code", tier="easy").get(0)
    plan = plan_for(task)
    assert plan.stages() == [["look"], ["write"], ["submit"]]
    short = GoldPlan(task.model_copy(update={"limits": task.limits.model_copy(update={"max_turns": 2})}),
                     plan.gold)
    assert short.stages() == [["look"], ["write", "submit"]]
    one = GoldPlan(task.model_copy(update={"limits": task.limits.model_copy(update={"max_turns": 1})}),
                   plan.gold)
    assert one.stages() == [["look", "write", "submit"]]


def test_a_gold_that_does_not_pass_is_not_kept(pool) -> None:
    task = registry.make("code", tier="easy").get(2)
    plan = plan_for(task)
    wrong = GoldPlan(task, FinalState(files={**task.workspace, "solution.py": "def nothing():\n    pass\n"}))
    assert play([wrong], _engine(pool)) == [] and len(play([plan], _engine(pool))) == 1


def test_single_turn_gold_is_the_reference_answer(pool) -> None:
    [ep] = play([plan_for(registry.make("math").get(3))], _engine(pool))
    assert ep.passed and [m.role for m in ep.messages] == ["user", "assistant"]


def test_with_the_trained_policy_the_token_record_is_its_template_and_its_tokens(wide, pool) -> None:
    tiny = wide
    task = registry.make("code", tier="easy").get(4)
    [ep] = play([plan_for(task)], _engine(pool), encoder=tiny)
    assert len(ep.token_ids) == len(ep.loss_mask) == len(ep.logprobs)
    end = tiny.tokenizer.eos_token_id
    turns, run = [], []
    for tok, m in zip(ep.token_ids, ep.loss_mask):
        if m:
            run.append(tok)
        elif run:
            turns.append(run)
            run = []
    turns += [run] if run else []
    said = [m.content for m in ep.messages if m.role == "assistant"]
    assert len(turns) == len(said) == 3
    for ids, text in zip(turns, said):  # each trained turn: the tokenizer's encoding of it, then end-of-turn
        assert ids[-1] == end and ids[:-1] == tiny.encode(text)
    last = max(i for i, m in enumerate(ep.messages) if m.role == "assistant")  # nothing is trained after it
    rendered = tiny.render(ep.messages[:last + 1], add_generation_prompt=False)
    assert tiny.decode(ep.token_ids).strip() == tiny.decode(tiny.encode(rendered)).strip()


def test_a_failed_episode_becomes_a_recovery_sample_played_through_the_env(pool) -> None:
    task = registry.make("code", tier="easy").get(5)
    bad = [tool_call_text("write_file", {"path": "solution.py", "content": "def oops(:\n"}),
           tool_call_text("run_tests"), tool_call_text("submit")]
    failed = Episode(task_id=task.id, domain=task.domain, messages=[
        Message(role="user", content=task.prompt), Message(role="assistant", content=bad[0]),
        Message(role="assistant", content=bad[1]), Message(role="assistant", content=bad[2])])
    plan = recovery_plan(failed, task)
    assert plan is not None and [m.content for m in plan.prefix] == bad[:2]
    [ep] = play([plan], _engine(pool))
    said = [m.content for m in ep.messages if m.role == "assistant"]
    assert said[:2] == bad[:2] and said[2].startswith("That did not work.") and ep.passed
    runs = [status for name, status in _tools(ep) if name == "run_tests"]
    assert runs == ["exit_nonzero", "ok"]  # the failure as it happened, then the fix that passes


def test_recovery_needs_a_multi_turn_task_a_turn_to_keep_and_room_to_fix() -> None:
    task = registry.make("code", tier="easy").get(0)
    one = Episode(task_id=task.id, domain=task.domain, messages=[Message(role="assistant", content="x")])
    assert recovery_plan(one, task) is None
    tight = task.model_copy(update={"limits": TaskLimits(max_turns=2)})
    two = one.model_copy(update={"messages": one.messages * 2})
    assert recovery_plan(two, tight) is None
    assert recovery_plan(two, registry.make("math").get(0)) is None


def _attempts_task_with_recovery(gold_recoveries: float = 1.0):
    src = registry.make("code", tier="tiny", mode="attempts", gold_recoveries=gold_recoveries, seed=4)
    return src, src.get(1)


def test_an_attempts_gold_gives_a_rival_reads_the_failing_case_and_answers(wide, pool) -> None:
    src, task = _attempts_task_with_recovery()
    plan = plan_for(task, src)
    assert plan.attempts == src.gold_attempts(task) and len(plan.attempts) == 2
    [ep] = play([plan], _engine(pool), encoder=wide)
    assert ep.passed and ep.metadata["attempts"] == [False, True]
    assert [m.role for m in ep.messages] == ["user", "assistant", "user", "assistant"]
    rival, told, answer = (m.content for m in ep.messages[1:])
    assert rival in task.metadata["consts"]["rivals"] and answer == task.answer
    assert "expected" in told and "returned" in told  # the real check's words, from the sandbox
    runs, run = [], 0  # both answers are trained on: two runs of loss-masked tokens
    for m in ep.loss_mask:
        run, runs = (run + 1, runs) if m else (0, runs + [run] if run else runs)
    assert len(runs + ([run] if run else [])) == 2
    [alone] = play([plan_for(task.model_copy(update={"id": "x"}), registry.make(
        "code", tier="tiny", mode="attempts", gold_recoveries=0.0, seed=4))], _engine(pool))
    assert alone.passed and alone.metadata["attempts"] == [True] and alone.num_turns == 1


def test_a_failed_attempts_episode_recovers_with_the_reference_after_its_feedback(wide, pool) -> None:
    src, task = _attempts_task_with_recovery()
    rivals = task.metadata["consts"]["rivals"]
    failed = Episode(task_id=task.id, domain=task.domain, messages=[
        Message(role="user", content=task.prompt), Message(role="assistant", content=rivals[0]),
        Message(role="user", content="told"), Message(role="assistant", content=rivals[1]),
        Message(role="user", content="told"), Message(role="assistant", content=rivals[0])])
    plan = recovery_plan(failed, task, src)
    assert plan is not None and [m.content for m in plan.prefix] == rivals[:2]
    [ep] = play([plan], _engine(pool), encoder=wide)
    said = [m.content for m in ep.messages if m.role == "assistant"]
    assert said == [*rivals[:2], task.answer] and ep.passed
    assert ep.metadata["attempts"] == [False, False, None]  # the last answer is the verifier's to judge
    # the replayed answers are context: only the reference answer is trained on
    assert sum(1 for a, b in zip([0, *ep.loss_mask], ep.loss_mask) if b and not a) == 1
    one = failed.model_copy(update={"messages": failed.messages[:2]})
    assert recovery_plan(one, task, src) is None  # nothing before the last answer to keep


def test_unmask_prefix_clears_the_first_turns_only() -> None:
    ep = Episode(task_id="t", domain="d", token_ids=list(range(9)), logprobs=[0.0] * 9,
                 loss_mask=[0, 1, 1, 0, 1, 0, 0, 1, 1])
    assert unmask_prefix(ep, 2).loss_mask == [0, 0, 0, 0, 0, 0, 0, 1, 1]
    assert unmask_prefix(ep, 0).loss_mask == ep.loss_mask


def test_sft_data_is_a_chat_dataset_a_template_with_tools_renders(cli, tmp_path: Path, tiny) -> None:
    out = tmp_path / "gold.jsonl"
    conf = tmp_path / "c.toml"
    conf.write_text('[tasks.domains.code]\ntier = "easy"\n')
    res = cli(["tasks", "sft-data", "code:3", "-o", str(out), "--config", str(conf)])
    assert res.code == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles[:3] == ["system", "user", "assistant"] and "tool" in roles
        calls = [c for m in row["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        answered = [m["tool_call_id"] for m in row["messages"] if m["role"] == "tool"]
        assert [c["id"] for c in calls] == answered  # every call answered, in order
        assert all(isinstance(c["function"]["arguments"], dict) for c in calls)
        assert not any("<tool_call>" in m["content"] for m in row["messages"] if m["role"] == "assistant")
        assert {t["function"]["name"] for t in row["tools"]} >= {"run_tests", "write_file", "submit"}
    template = (Path(__file__).parents[2] / "real" / "chatml_tools.jinja").read_text()
    text = tiny.tokenizer.apply_chat_template(rows[0]["messages"], tools=rows[0]["tools"], tokenize=False,
                                              chat_template=template)
    assert "<tools>" in text and "run_tests" in text


def test_a_domain_without_references_is_one_line(cli, tmp_path: Path) -> None:
    from tests.conftest import write_task

    pack = tmp_path / "pack"
    write_task(pack, "bare", toml='id = "bare"\ndomain = "code"\n[limits]\nmax_turns = 3\n',
               workspace={"a.py": "x = 1\n"}, hidden={"test_a.py": "def test_a():\n    pass\n"})
    out = tmp_path / "none.jsonl"
    res = cli(["tasks", "sft-data", str(pack), "-o", str(out)])
    assert res.code == 2 and "has no reference solutions" in res.stderr and res.stderr.count("\n") == 1
    assert not out.exists()


def test_gold_turns_are_deterministic(pool) -> None:
    tasks = registry.make("code", tier="easy").sample(2, seed=7)

    def turns() -> list[list[str]]:  # tool outputs carry timings; what the gold policy says does not vary
        eps = play([plan_for(t) for t in tasks], _engine(pool))
        return [[m.content for m in e.messages if m.role == "assistant"] for e in eps]

    first = turns()
    assert len(first) == 2 and all(first)  # both trajectories passed: the comparison is of real turns
    assert first == turns()


def test_a_state_files_cannot_write_is_reached_by_the_domains_gold_commands() -> None:
    """A shell task's gold (a packed tree with modes or a git history) is played as terminal commands; a tree
    task whose domain gives none is refused in one line."""
    from rlvr.domains.shell.families import registry as families
    from rlvr.errors import UserError
    from rlvr.sandbox.tree import TREE
    from rlvr.tasks.source import ListSource

    task = registry.make("shell", families=("git_squash",), tier="medium").get(0)
    plan = plan_for(task)
    assert plan.commands == families()["git_squash"].solve(task.verifier["params"])
    conversation = [Message(role="user", content=task.prompt), Message(role="assistant", content="look")]
    write = plan.next_turn(conversation)
    assert write.count('"name": "bash"') == len(plan.commands) and "write_file" not in write
    bare = task.model_copy(update={"solution": {TREE: task.workspace[TREE]}})
    with pytest.raises(UserError, match="gold commands"):
        plan_for(bare, ListSource([bare]))


def test_unmask_prefix_counts_turns_across_the_records_segments() -> None:
    seg = {"token_ids": list(range(5)), "loss_mask": [0, 1, 0, 1, 1], "logprobs": [0.0] * 5}
    ep = Episode(task_id="t", domain="d", token_ids=list(range(4)), logprobs=[0.0] * 4,
                 loss_mask=[0, 1, 0, 1], metadata={"segments": [seg]})
    out = unmask_prefix(ep, 3)
    assert out.metadata["segments"][0]["loss_mask"] == [0, 0, 0, 0, 0] and out.loss_mask == [0, 0, 0, 1]
    assert ep.metadata["segments"][0]["loss_mask"] == [0, 1, 0, 1, 1]  # the original is left as it was
