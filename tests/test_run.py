"""The one run builder: every command reads a tasks SPEC with the config's domain settings, gets its pool from
the run (local or the cluster's), and the train spec is read once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr import run
from rlvr.config import load_config
from rlvr.sandbox.unsafe import UnsafePool
from rlvr.tasks.selection import resolve

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "smollm2-grpo.toml"
SPEC = "rg-basic_arithmetic:5"


def test_tasks_of_applies_the_configs_domain_settings() -> None:
    cfg = load_config(EXAMPLE)
    configured = [t.prompt for t in run.tasks_of(SPEC, cfg, seed=0)]
    plain = [t.prompt for t in resolve(SPEC, seed=0)]
    assert configured != plain  # the example's two-digit additions, not the dataset's default expressions
    # a bare mapping too
    assert [t.prompt for t in run.tasks_of(SPEC, cfg.tasks.domains, seed=0)] == configured


def test_eval_with_a_config_sees_the_tasks_training_sees(cli, tmp_path: Path, monkeypatch) -> None:
    """`rlvr eval --config` used to drop `[tasks.domains]`: the example's held-out figure could not be
    reproduced."""
    from rlvr.store.episodes import open_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "answer.json").write_text(json.dumps(["<answer>0</answer>"]))
    res = cli(["eval", "--config", str(EXAMPLE), "--policy", f"scripted:{tmp_path / 'answer.json'}",
               "--tasks", SPEC, "-k", "1", "--json"])
    assert res.code == 0, res.stderr
    [eval_dir] = sorted((tmp_path / "runs" / "eval").iterdir())
    seen = sorted(next(m.content for m in ep.messages if m.role == "user")
                  for ep in open_run(eval_dir).episodes())
    want = sorted(t.prompt for t in run.tasks_of(SPEC, load_config(EXAMPLE), seed=0))
    assert seen == want


class _Pool(UnsafePool):
    """An unisolated pool that says whether it was closed."""

    closed = False

    def __init__(self) -> None:
        super().__init__(warn=False)

    def close(self) -> None:
        self.closed = True
        super().close()


class _Recorded:
    """`open_pool` that records the cluster it was asked for and hands back an unisolated pool."""

    def __init__(self) -> None:
        self.addresses: list[str | None] = []

    def __call__(self, sandbox, cluster):
        self.addresses.append(cluster.address)
        return _Pool()


def test_tasks_profile_takes_its_pool_from_the_run_so_a_cluster_is_used(monkeypatch, tmp_path: Path) -> None:
    """`tasks profile` used to make a local pool whatever the config said."""
    from rlvr.commands.profile import run_profile

    recorded = _Recorded()
    monkeypatch.setattr(run, "open_pool", recorded)
    (tmp_path / "answer.json").write_text(json.dumps(["<answer>0</answer>"]))
    cfg = load_config(EXAMPLE, ['cluster.address="ray://head:10001"'])
    report = run_profile(f"scripted:{tmp_path / 'answer.json'}", SPEC, 2, cfg=cfg, sample=2)
    assert recorded.addresses == ["ray://head:10001"]
    assert len(report.tasks) == 5


def test_the_train_spec_is_read_once_when_a_run_is_built(monkeypatch) -> None:
    cfg = load_config(None, ['tasks.train="code:8"', 'tasks.heldout_offset=1000'])
    parsed: list[str] = []
    real = run.parse

    def counting(spec: str):
        parsed.append(spec)
        return real(spec)

    monkeypatch.setattr(run, "parse", counting)
    train = run.selections(cfg.tasks.train, cfg)
    tasks, indices = run.heldout(cfg, train)
    assert parsed == ["code:8", "code:200"]  # the train spec once, the derived held-out spec once
    assert len(tasks) == 200 and indices == {}


def test_build_closes_what_it_opened_and_borrows_what_it_is_given(monkeypatch) -> None:
    opened: list[_Pool] = []

    def fresh(sandbox, cluster):
        opened.append(_Pool())
        return opened[-1]

    monkeypatch.setattr(run, "open_pool", fresh)
    cfg = load_config(None)
    with pytest.raises(RuntimeError), run.build(cfg, policy=False) as built:
        assert built.pool is opened[0] and built.policy is None
        raise RuntimeError("the run fails")
    assert opened[0].closed
    mine = _Pool()
    with run.build(cfg, policy=False, pool=mine) as built:
        assert built.pool is mine
    assert not mine.closed  # borrowed: its owner closes it
    mine.close()
    # no policy, nothing to roll out with; a gold policy still plays through the env
    assert built.rollouts is None
    assert built.gold(object()).pool is mine


def test_eval_with_a_config_and_no_tasks_measures_the_held_out_set_training_measures(cli, tmp_path,
                                                                                     monkeypatch) -> None:
    """`rlvr eval --config` with no --tasks drew tasks:heldout from index 0: training tasks, not the held-out
    set."""
    from rlvr.store.episodes import open_run

    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "c.toml"
    conf.write_text('[tasks]\ntrain = "code"\nheldout = "code:3"\nheldout_offset = 5000\n')  # procedural
    (tmp_path / "answer.json").write_text(json.dumps(["<answer>0</answer>"]))
    res = cli(["eval", "--config", str(conf), "--policy", f"scripted:{tmp_path / 'answer.json'}", "-k", "1"])
    assert res.code == 0, res.stderr
    [eval_dir] = sorted((tmp_path / "runs" / "eval").iterdir())
    seen = sorted(ep.task_id for ep in open_run(eval_dir).episodes())
    want = sorted(t.id for t in run.heldout_tasks(load_config(conf)))
    assert seen == want and all(int(i.rsplit("-", 1)[1]) >= 5000 for i in seen)
