"""`[agent] command` in `rlvr train`: the RL rollouts and the held-out evaluation are played by an agent of
the real `openai` SDK in the sandbox through the gateway; its episodes are grouped, stored and trained on,
every segment on its own tokens; what agents cannot do is refused in one line."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from rlvr import run
from rlvr.config import RunConfig
from rlvr.errors import UserError
from rlvr.store.episodes import EpisodeStore
from rlvr.store.layout import RunLayout
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain, VerifierKind
from rlvr.tasks.source import ListSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.train import checkpoint, loop
from rlvr.verify.verdict import Check, Verdict

TOY = "agenttrain_toy"

# Two calls; the second sends a history that does not extend the first (the agent "summarised" it): a new
# segment. The answer is what the model wrote, so rewards vary across a group even for a random model.
AGENT = textwrap.dedent('''
    import os, openai
    client = openai.OpenAI(max_retries=0)
    prompt = open(os.environ["RLVR_PROMPT_FILE"]).read()
    first = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt}],
                                           max_tokens=5).choices[0].message.content or ""
    second = client.chat.completions.create(model="policy", max_tokens=5, messages=[
        {"role": "user", "content": "summary: " + first[:8]}]).choices[0].message.content or ""
    open("answer.txt", "w").write(first + second)
    print(first + second)
''')


class _ShareOfVowels:
    """The share of vowels in the answer the agent printed, if it wrote answer.txt too: a graded reward."""

    def verify(self, task: Task, final: FinalState) -> Verdict:
        text = final.answer or ""
        ok = "answer.txt" in final.files
        score = sum(c in "aeiou" for c in text) / max(1, len(text)) if ok else 0.0
        return Verdict.from_checks([Check(name="vowels", score=score, passed=score > 0.5)])


def _source(cfg: object) -> ListSource:
    return ListSource([Task(id=f"t{i}", domain=TOY, prompt=f"say vowels {i}", workspace={"notes.txt": "hi\n"},
                            limits=TaskLimits(max_turns=4, max_tokens=40, wall_s=60)) for i in range(20)],
                            name=TOY)


@pytest.fixture(scope="module", autouse=True)
def _toy_domain():
    registry.names()
    registry.register(Domain(TOY, _source, verifiers={TOY: VerifierKind(lambda ctx: _ShareOfVowels())}))
    yield
    registry.unregister(TOY)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.rollout.policies.builtin import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-agent"), n_layer=1, n_embd=32, n_head=2,
                            n_positions=1024, seed=7)


def _cfg(tmp_path: Path, model: Path, agent_dir: Path, **over: dict) -> RunConfig:
    data: dict = {
        "name": "agent", "output_dir": str(tmp_path), "seed": 3,
        "tasks": {"train": f"{TOY}:16", "heldout": f"{TOY}:2", "heldout_offset": 16},
        "sandbox": {"isolation": "bwrap"},
        "policy": {"model": str(model), "max_new_tokens": 5},
        "rollout": {"group_size": 3},
        "train": {"steps": 1, "batch_size": 2, "lr": 3e-3, "checkpoint_every": 1, "heldout_samples": 1,
                  "heldout_greedy": False},
        "schedule": {"skip_zero_variance": False},
        "sft": {"enabled": False},
        "monitor": {"tensorboard": False, "report": False},
        "agent": {"command": "python $RLVR_AGENT_DIR/agent.py", "dir": str(agent_dir), "concurrency": 3},
    }
    for section, values in over.items():
        data[section] = {**data.get(section, {}), **values}
    return RunConfig.model_validate(data)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.timeout(600)
def test_train_with_an_agent_stores_its_episodes_and_updates_on_every_segment(
        tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM

    assert shutil.which("bwrap"), "agents run in the bubblewrap sandbox: `make setup` installs it"

    agent_dir = tmp_path / "agent-files"
    agent_dir.mkdir()
    (agent_dir / "agent.py").write_text(AGENT)
    cfg = _cfg(tmp_path, model_dir, agent_dir)
    fed: list[tuple[list, list]] = []
    real = loop.samples_from

    def spy(episodes, advantages, turns=None):
        samples = real(episodes, advantages, turns)
        fed.append((list(episodes), samples))
        return samples

    monkeypatch.setattr(loop, "samples_from", spy)
    run.train(cfg, resume=False)

    stored = list(EpisodeStore(cfg.run_dir).episodes())
    assert len(stored) == 2 * 3 and {ep.step for ep in stored} == {0}
    for ep in stored:  # played by the agent through the gateway, judged on its workspace and stdout
        assert ep.metadata["agent"] == cfg.agent.command and ep.metadata["agent_exit_code"] == 0, ep.metadata
        assert ep.status == "done" and not ep.masked and ep.num_turns == 2
        assert len(ep.metadata["segments"]) == 1  # the summarised history: a second segment
        assert "answer.txt" in ep.final_state.files and ep.final_state.answer
    groups = {ep.group_id for ep in stored}
    assert len(groups) == 2 and all(sum(ep.group_id == g for ep in stored) == 3 for g in groups)
    assert len({ep.seed for ep in stored}) == 6

    # the update got one sample per segment, each on its own tokens: 2 a learnt episode
    (episodes, samples), = fed
    assert len(episodes) == 2 * 6 and len(samples) == 2 * 6
    for ep in stored:
        seg = ep.metadata["segments"][0]
        tokens = [s.token_ids for s in samples]
        assert seg["token_ids"] in tokens and ep.token_ids in tokens and seg["token_ids"] != ep.token_ids

    before = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    after = checkpoint.load(str(cfg.run_dir), 1)["model"]
    common = [k for k in after if k in before and after[k].shape == before[k].shape]
    assert common and any(not torch.equal(after[k], before[k]) for k in common)

    # the held-out evaluation (before and after) ran through the agent too
    for label in ("before", "after"):
        held = list(EpisodeStore(RunLayout(str(cfg.run_dir)).heldout_store(label)).episodes())
        assert len(held) == 2 and all(ep.metadata.get("agent") == cfg.agent.command for ep in held), label


@pytest.mark.parametrize(("over", "match"), [
    ({"train": {"max_staleness": 1}}, "synchronously"),
    ({"train": {"world_size": 2}}, "one rank"),
    ({"cluster": {"address": "ray://head:10001"}}, "not on a cluster"),
    ({"sandbox": {"isolation": "none"}}, "isolated sandbox"),
    ({"agent": {"command": "python 'unbalanced"}}, "does not parse"),
])
def test_what_agents_cannot_train_with_is_refused_in_one_line(tmp_path: Path, model_dir: Path, over: dict,
                                                              match: str) -> None:
    cfg = _cfg(tmp_path, model_dir, tmp_path, **over)
    with pytest.raises(UserError, match=match) as err:
        run.validate(cfg)
    assert "\n" not in str(err.value.args[0])
