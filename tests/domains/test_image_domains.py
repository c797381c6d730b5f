"""The domains that run in their own images, end to end (marker `images`, `make test-images`): `rlvr tasks
validate --domain` proves a sample of every tier (gold 1, every negative control 0), the gold trajectories of
every shell family and of samples of c and sql pass when played at a terminal through the env, a short
`rlvr train` run of the quickstart's shape trains on all three, and their tasks exported as Harbor tasks
validate and keep their verdicts."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rlvr.commands.gold import gold_episodes, tool_specs
from rlvr.config import load_config
from rlvr.domains.harbor.export import export, task_dir_name
from rlvr.domains.harbor.format import load_task
from rlvr.domains.shell.families import registry as shell_families
from rlvr.rollout.policies.gold import plan_for
from rlvr.store.episodes import EpisodeStore
from rlvr.tasks import registry
from rlvr.verify.base import verify
from rlvr.verify.proof import source_of

pytestmark = pytest.mark.images
DOMAINS = ("c", "sql", "shell")


@pytest.mark.parametrize("domain", DOMAINS)
def test_validate_proves_a_task_of_each_tier(cli, domain: str) -> None:
    res = cli(["tasks", "validate", "--domain", domain, "-n", "3"])
    assert res.code == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "3/3 tasks valid" in res.stdout


def test_gold_trajectories_pass_when_played_at_a_terminal(tmp_path: Path) -> None:
    shell = [registry.make("shell", families=(name,), tier=fam.tier, seed=2).get(0)
             for name, fam in sorted(shell_families().items())]
    tasks = shell + registry.make("c", seed=2).sample(3) + registry.make("sql", seed=2).sample(3)
    cfg = load_config(None, [f'output_dir="{tmp_path}"'])
    episodes = gold_episodes([plan_for(t) for t in tasks], cfg, show_progress=False)
    passed = {f"{ep.domain}/{ep.task_id}" for ep in episodes}
    assert passed == {t.key for t in tasks}, sorted({t.key for t in tasks} - passed)
    by_key = {t.key: t for t in tasks}
    for ep in episodes:
        calls = [m.content for m in ep.messages if m.role == "assistant"]
        assert "submit" in calls[-1] and not ep.masked
        assert "bash" in {t["function"]["name"] for t in tool_specs(by_key[f"{ep.domain}/{ep.task_id}"])}
    terminal = [ep for ep in episodes if ep.domain == "shell"]
    assert all(any('"bash"' in m.content for m in ep.messages if m.role == "assistant") for ep in terminal)


def test_a_short_train_run_on_the_three_domains(cli, tmp_path: Path) -> None:
    from rlvr.rollout.policies.builtin import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", n_layer=1, n_embd=32, n_head=2, n_positions=4096, seed=7)
    config = tmp_path / "train.toml"
    config.write_text(textwrap.dedent(f"""
        name = "terminal-domains"
        output_dir = "{tmp_path / 'runs'}"
        [tasks]
        train = "c:1,sql:1,shell:1"
        heldout = ""
        [policy]
        model = "{model}"
        max_new_tokens = 8
        [rollout]
        group_size = 2
        max_turns = 2
        [train]
        steps = 1
        batch_size = 3
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
    assert sorted(ep.domain for ep in stored) == ["c", "c", "shell", "shell", "sql", "sql"]
    assert all(not ep.masked and ep.verdict is not None and ep.verdict.infra_error is None for ep in stored)
    assert all(ep.verdict.checks for ep in stored)  # judged by each domain's own verifier in its image
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["wall_s"] > 0


@pytest.mark.timeout(1800)
def test_exported_as_harbor_tasks_they_validate_with_the_same_verdicts(cli, tmp_path: Path) -> None:
    tasks = [registry.make("c", seed=3).get(0), registry.make("sql", seed=3).get(1),
             registry.make("shell", families=("git_squash",), tier="medium", seed=3).get(0)]  # a git tree
    out = tmp_path / "harbor"
    export(tasks, out)
    res = cli(["tasks", "validate", f"harbor:{out}", "--json"])  # solve.sh 1, Harbor's controls 0
    report = json.loads(res.stdout)
    assert res.code == 0 and report["ok"], report
    assert len(report["tasks"]) == 3
    for task in tasks:
        imported = load_task(out / task_dir_name(task))
        own = list(source_of(task).negatives(task).items())[2:4]  # the domain's own controls
        assert own, task.key
        for name, state in own:
            native, harbor = verify(task, state), verify(imported, state)
            assert harbor.infra_error is None, (task.key, name, harbor.details)
            assert (harbor.passed, harbor.reward()) == (native.passed, native.reward()) == (False, 0.0), \
                (task.key, name, native, harbor)
