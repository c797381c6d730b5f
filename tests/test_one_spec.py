"""One tasks SPEC names one task set: `rlvr tasks show/sample/sft-data`, `rlvr eval`, `rlvr serve`, `rlvr
train` and the adapters resolve `code:2` to the same task ids, with each domain's own defaults when no config
is given and with a config's `[tasks.domains]` when one is. The quickstart's tier is the quickstart's own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.config import QUICKSTART, RunConfig, TasksConfig, TrainConfig, load_config
from rlvr.integrations.session import Runtime, resolve_tasks

SUBMIT = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
TINY = '[tasks.domains.code]\ntier = "tiny"\n'


def _shown(cli, n: int, *extra: str) -> list[str]:
    ids = []
    for i in range(n):
        res = cli(["tasks", "show", f"code:{i}", "--json", *extra])
        assert res.code == 0, res.stderr
        ids.append(json.loads(res.stdout)["id"])
    return ids


def _sampled(cli, n: int, *extra: str) -> list[str]:
    res = cli(["tasks", "sample", "code", "-n", str(n), "--json", *extra])
    assert res.code == 0, res.stderr
    return [t["id"] for t in json.loads(res.stdout)]


def _evaluated(cli, tmp_path: Path, *extra: str) -> list[str]:
    script = tmp_path / "submit.json"
    script.write_text(json.dumps({"default": [SUBMIT]}))
    res = cli(["eval", "--policy", f"scripted:{script}", "--tasks", "code:2", "--json",
               "--output-dir", str(tmp_path / "evals"), *extra])
    assert res.code == 0, res.stderr
    return sorted(json.loads(res.stdout)["per_task"]["code"])


def test_a_spec_names_the_same_tasks_in_every_command_without_a_config(cli, tmp_path: Path) -> None:
    """No config: every command builds `code` with the domain's own defaults (easy, multi-turn)."""
    from rlvr.integrations.skyrl import RlvrTextEnv
    from rlvr.integrations.trl import environment_factory
    from rlvr.integrations.verifiers import RlvrTaskset, RlvrTasksetConfig
    from rlvr.rollout.policies.builtin import build_tiny_model
    from rlvr.store import EpisodeStore

    shown = _shown(cli, 2)
    assert all(i.startswith("easy-multi-") for i in shown), shown
    assert _sampled(cli, 2) == shown
    assert _evaluated(cli, tmp_path) == sorted(shown)
    # sft-data plays each task's gold trajectory: its conversations open with the tasks' own prompts
    prompts = [json.loads(cli(["tasks", "show", f"code:{i}", "--json"]).stdout)["prompt"] for i in range(2)]
    data = tmp_path / "sft.jsonl"
    res = cli(["tasks", "sft-data", "code:2", "-o", str(data)])
    assert res.code == 0, res.stderr
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert sorted(next(m["content"] for m in r["messages"] if m["role"] == "user") for r in rows) == sorted(
        prompts)
    assert all(r["tools"] for r in rows)  # multi-turn tasks: the tools came with them
    # rlvr serve (its tasks: resolve_tasks without settings) and the adapters
    assert [t.id for t in resolve_tasks("code:2")] == shown
    assert [t.id for t in Runtime.build("code:2").tasks] == shown
    assert [t.id for t in environment_factory("code:2").runtime.tasks] == shown
    assert [RlvrTextEnv({"tasks": "code:2"}, {"task": i}).task.id for i in range(2)] == shown
    taskset = RlvrTaskset(RlvrTasksetConfig(tasks="code:2"))
    assert [t.data.task for t in taskset.load()] == [f"code/{i}" for i in shown]
    # rlvr train with a config that names no domain settings trains on the same tasks
    model = build_tiny_model(tmp_path / "model", n_layer=1, n_embd=32, n_head=2, n_positions=256, seed=1)
    conf = tmp_path / "run.toml"
    conf.write_text(f'name = "spec"\noutput_dir = "{tmp_path}"\n[tasks]\ntrain = "code:2"\nheldout = ""\n'
                    f'[policy]\nmodel = "{model}"\nmax_new_tokens = 4\n[rollout]\ngroup_size = 1\n'
                    f'max_turns = 1\n[train]\nsteps = 1\nbatch_size = 2\n[sft]\nenabled = false\n'
                    f'[monitor]\ntensorboard = false\nreport = false\n')
    res = cli(["train", str(conf)])
    assert res.code == 0, res.stderr
    trained = {ep.task_id for ep in EpisodeStore(tmp_path / "spec").episodes()}
    assert trained and trained <= set(shown)


def test_a_config_gives_every_command_the_same_domain_settings(cli, tmp_path: Path) -> None:
    """With a config's `[tasks.domains]` (here the quickstart's tier), show, sample, eval, serve and the
    adapters all build the domain with it."""
    from rlvr.integrations.trl import load_tasks
    from rlvr.integrations.verl import rows

    conf = tmp_path / "tiny.toml"
    conf.write_text(TINY)
    shown = _shown(cli, 2, "--config", str(conf))
    assert all(i.startswith("tiny-single-") for i in shown), shown
    assert _sampled(cli, 2, "--config", str(conf)) == shown
    assert _evaluated(cli, tmp_path, "--config", str(conf)) == sorted(shown)
    settings = load_config(conf).tasks.domains
    assert [t.id for t in Runtime.build("code:2", config=load_config(conf)).tasks] == shown
    assert [r["extra_info"]["rlvr_task"] for r in rows("code:2", settings=settings)] == [
        f"code/{i}" for i in shown]
    assert [t.id for t in load_tasks("code:2", settings=settings)] == shown


def test_the_quickstart_keeps_its_tier_and_nothing_else_inherits_it() -> None:
    quick = load_config(QUICKSTART)
    # the quickstart runs exactly as it did: the defaults with its tier and its name
    assert quick == RunConfig(name="quickstart", tasks=TasksConfig(domains={"code": {"tier": "tiny"}}),
                              train=TrainConfig(truncation="score"))
    assert RunConfig().tasks.domains == {} and load_config().tasks.domains == {}
    from rlvr.run import heldout_tasks

    assert {t.tier for t in heldout_tasks(quick)} == {"tiny"}


@pytest.mark.parametrize("argv", [["eval", "--help"], ["tasks", "show", "--help"]])
def test_help_says_which_settings_a_config_brings(cli, argv: list[str]) -> None:
    assert "[tasks.domains]" in cli(argv).stdout
