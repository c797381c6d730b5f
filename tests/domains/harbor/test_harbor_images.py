"""Harbor tasks in real images (marker `images`, `make test-images`): every test task proves its verifier
(solve.sh 1, the untouched environment, the deleted tests and the agent that only writes reward files 0), a
scripted policy plays them through `rlvr eval` with the terminal and file tools, a short `rlvr train` run
trains on one, an exported rlvr task imports with the same verdicts, and an agent from outside plays it. The
task images build FROM the base image `make images` tags, and stay cached in podman's store and rlvr's image
cache."""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from rlvr.domains.harbor.export import export, task_dir_name
from rlvr.domains.harbor.format import load_task
from rlvr.domains.harbor.judge import ANSWER_FILE
from rlvr.domains.harbor.source import HarborSource
from rlvr.store.episodes import EpisodeStore
from rlvr.tasks.selection import resolve
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import verify
from rlvr.verify.proof import source_of

pytestmark = pytest.mark.images
TASKS = Path(__file__).resolve().parents[2] / "assets" / "harbor" / "tasks"


def _call(name: str, **arguments: str) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


SCRIPT = {"match": [
    {"prompt_contains": "hello.txt", "turns": [  # the terminal, over several turns
        _call("bash", command="pwd && ls tests && sh tests/visible.sh"),
        _call("bash", command="echo 'Hello, world!' > /app/hello.txt && sh /app/tests/visible.sh"),
        _call("submit")]},
    {"prompt_contains": "answer.txt", "turns": [_call("write_file", path="answer.txt", content="Hello"),
                                                _call("submit")]},
    {"prompt_contains": "number 42", "turns": [  # an agent that only writes reward files
        _call("bash", command="mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; mkdir -p "
                              "logs/verifier && echo 1 > logs/verifier/reward.txt && echo 1 > reward.txt"),
        _call("submit")]},
]}


def test_every_harbor_task_proves_its_verifier(cli) -> None:
    res = cli(["tasks", "validate", f"harbor:{TASKS}", "--json"])
    report = json.loads(res.stdout)
    assert res.code == 0 and report["ok"], report
    assert [r["task"] for r in report["tasks"]] == ["hello", "partial", "separate"]
    assert all("gold 1.0, 4 negative controls 0" in r["detail"] for r in report["tasks"])
    hello = load_task(TASKS / "hello")
    controls = HarborSource().negatives(hello)
    assert set(controls["untouched"].files) == {"tests/visible.sh"}  # the image's own WORKDIR
    assert controls["tests_deleted"].files == {}  # the visible test it could reach, deleted
    assert "echo PASS" in controls["tests_edited"].files["tests/visible.sh"]  # or made to pass
    assert {"reward.txt", "logs/verifier/reward.txt"} <= set(controls["reward_file_only"].files)
    assert HarborSource().gold(hello).files["hello.txt"] == "Hello, world!\n"


GULLIBLE = {  # tests that trust what the agent can write: the negative controls must catch each
    "trusts-reward-files": "cat /app/reward.txt > /logs/verifier/reward.txt 2>/dev/null || "
                           "echo 0 > /logs/verifier/reward.txt\n",
    "trusts-visible-tests": 'if [ "$(sh /app/tests/visible.sh)" = PASS ]; then echo 1; else echo 0; fi '
                            "> /logs/verifier/reward.txt\n",
}


def test_the_negative_controls_catch_tests_that_trust_the_agent(cli, tmp_path: Path) -> None:
    for name, test_sh in GULLIBLE.items():
        shutil.copytree(TASKS / "hello", tmp_path / name)
        (tmp_path / name / "tests" / "test.sh").write_text(test_sh)
    report = json.loads(cli(["tasks", "validate", f"harbor:{tmp_path}", "--json"]).stdout)
    rows = {r["task"]: r["detail"] for r in report["tasks"]}
    assert not report["ok"] and "gold 1.0" not in "".join(rows.values())
    assert "negative control 'reward_file_only' earned 1.00" in rows["trusts-reward-files"], rows
    assert "negative control 'tests_edited' earned 1.00" in rows["trusts-visible-tests"], rows


@pytest.mark.timeout(600)
def test_a_scripted_policy_plays_harbor_tasks_through_eval(cli, tmp_path: Path) -> None:
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    res = cli(["eval", "--policy", f"scripted:{tmp_path / 'script.json'}", "--tasks", f"harbor:{TASKS}",
               "--output-dir", str(tmp_path / "eval"), "--json"])
    assert res.code == 0, res.stderr[-2000:]
    report = json.loads(res.stdout)
    assert report["masked_episodes"] == 0 and report["per_task"]["harbor"]["hello"] == [1, 1]
    episodes = {ep.task_id: ep for ep in EpisodeStore(report["store"]).episodes()}
    hello, partial, separate = episodes["hello"], episodes["partial"], episodes["separate"]
    assert hello.num_turns == 3 and hello.reward == 1.0
    assert hello.final_state.files["hello.txt"] == "Hello, world!\n"
    assert "PASS" in json.dumps([m.content for m in hello.messages])  # the visible test, in the image
    assert partial.reward == 0.5 and not partial.verdict.passed  # partial credit from reward.json
    assert separate.reward == 0.0 and separate.final_state.files["logs/verifier/reward.txt"] == "1\n"
    refused = "\n".join(m.content for m in separate.messages)
    assert "cannot create directory \u2018/logs\u2019: Permission denied" in refused  # not the agent's


@pytest.mark.timeout(900)
def test_a_short_train_run_on_a_harbor_task(cli, tmp_path: Path) -> None:
    from rlvr.rollout.policies.builtin import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", n_layer=1, n_embd=32, n_head=2, n_positions=1024, seed=7)
    config = tmp_path / "train.toml"
    config.write_text(textwrap.dedent(f"""
        name = "harbor"
        output_dir = "{tmp_path / 'runs'}"
        [tasks]
        train = "harbor:{TASKS / 'hello'}"
        heldout = ""
        [policy]
        model = "{model}"
        max_new_tokens = 8
        [rollout]
        group_size = 2
        max_turns = 2
        [train]
        steps = 1
        batch_size = 1
        [schedule]
        skip_zero_variance = false
        [sft]
        enabled = false
        [monitor]
        tensorboard = false
        report = false
        """))
    res = cli(["train", str(config)])
    assert res.code == 0, res.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    stored = list(EpisodeStore(run_dir).episodes())
    assert len(stored) == 2 and all(ep.task_id == "hello" and not ep.masked for ep in stored)
    assert all(ep.verdict.infra_error is None and ep.verdict.checks for ep in stored)  # judged by test.sh


IMAGE = Path(__file__).resolve().parents[2] / "sandbox" / "images" / "user"
"""A test image with its own USER and WORKDIR (tests/sandbox/images/user)."""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Task]]:
    code, extraction = resolve("code:1,extraction:1")
    in_image = extraction.model_copy(update={"id": "in-image", "image": f"dockerfile:{IMAGE}"})
    tasks = [code, extraction, in_image]  # files; an answer; a task in its own image, as its user
    out = tmp_path_factory.mktemp("exported") / "harbor"
    export(tasks, out)
    return out, tasks


def _as_harbor(task: Task, state: FinalState) -> FinalState:
    """The same final state as an exported task's agent leaves it: its files, its answer in answer.txt."""
    files = dict(state.files)
    if state.answer is not None and not task.multi_turn:
        files[ANSWER_FILE] = state.answer
    return FinalState(files=files)


@pytest.mark.timeout(1200)
def test_an_exported_task_imports_with_the_same_verdicts(exported: tuple[Path, list[Task]]) -> None:
    out, tasks = exported
    for task in tasks:
        imported = load_task(out / task_dir_name(task))
        src = source_of(task)
        states = {"gold": src.gold(task), **dict(list(src.negatives(task).items())[:2])}  # two controls
        for name, state in states.items():
            native, harbor = verify(task, state), verify(imported, _as_harbor(task, state))
            assert harbor.infra_error is None, (task.key, name, harbor.infra_error)
            same = (harbor.passed, harbor.reward()) == (native.passed, native.reward())
            assert same, (task.key, name, native, harbor)
        gold = HarborSource().gold(imported)  # solve.sh, played in the exported environment
        assert verify(imported, gold).passed


AGENT = textwrap.dedent('''
    import json, os, shutil, urllib.request
    body = {"model": "policy", "max_tokens": 4,
            "messages": [{"role": "user", "content": open(os.environ["RLVR_PROMPT_FILE"]).read()}]}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    reply = json.load(urllib.request.urlopen(req))["choices"][0]["message"]
    for name in os.listdir(os.environ["RLVR_AGENT_DIR"]):
        if name != "agent.py":
            shutil.copy(os.path.join(os.environ["RLVR_AGENT_DIR"], name), name)
    print("asked the policy once")
''')


@pytest.mark.timeout(900)
def test_an_agent_from_outside_plays_an_exported_harbor_task(exported: tuple[Path, list[Task]], cli,
                                                              tmp_path: Path) -> None:
    from rlvr.rollout.policies.builtin import build_tiny_model

    out, tasks = exported
    task = tasks[0]  # code: its environment has the Python the agent runs on
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    (agent_dir / "agent.py").write_text(AGENT)
    for rel, text in (task.solution or {}).items():
        (agent_dir / rel).write_text(text)
    model = build_tiny_model(tmp_path / "tiny", n_layer=1, n_embd=32, n_head=2, n_positions=1024, seed=7)
    res = cli(["eval", "--policy", f"hf:{model}", "--tasks", f"harbor:{out / task_dir_name(task)}",
               "--agent", "python3 $RLVR_AGENT_DIR/agent.py", "--agent-dir", str(agent_dir),
               "--output-dir", str(tmp_path / "eval"), "--json"])
    assert res.code == 0, res.stderr[-2000:]
    report = json.loads(res.stdout)
    (ep,) = EpisodeStore(report["store"]).episodes()
    assert ep.metadata["agent_exit_code"] == 0 and ep.num_turns == 1 and ep.reward == 1.0, ep.metadata
