"""The training loop end to end: exact resume after a kill, finished runs, fresh starts, and a
quickstart-shaped smoke run with the real code domain, sandbox and verifier on tiny budgets."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr import run
from rlvr.config import QUICKSTART, RunConfig, load_config
from rlvr.monitor.evals import compare, load_report
from rlvr.store.episodes import EpisodeStore
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain, VerifierKind
from rlvr.tasks.source import ListSource
from rlvr.tasks.spec import FinalState, Task, TaskLimits
from rlvr.train import checkpoint, loop
from rlvr.verify.verdict import Check, Verdict

TOY = "trainloop_toy"


class _ShareOfVowels:
    """Toy verifier: the share of vowels in the answer, a graded reward even a random model earns."""

    def verify(self, task: Task, final: FinalState) -> Verdict:
        text = final.answer or ""
        score = sum(c in "aeiou" for c in text) / max(1, len(text))
        return Verdict.from_checks([Check(name="vowels", score=score, passed=score > 0.5)])


def _toy_source(cfg: object) -> ListSource:
    tasks = [Task(id=f"t{i}", domain=TOY, prompt=f"say vowels {i}", limits=TaskLimits(max_tokens=6))
             for i in range(40)]
    return ListSource(tasks, name=TOY)


@pytest.fixture(scope="module", autouse=True)
def _toy_domain():
    registry.names()  # load the built-ins first
    registry.register(Domain(TOY, _toy_source, verifiers={TOY: VerifierKind(lambda ctx: _ShareOfVowels())}))
    yield
    registry.unregister(TOY)


def _cfg(tmp_path: Path, model: Path, name: str, **train: object) -> RunConfig:
    data = {
        "name": name, "output_dir": str(tmp_path), "seed": 3,
        "tasks": {"train": f"{TOY}:40", "heldout": f"{TOY}:6", "heldout_offset": 0},
        "sandbox": {"isolation": "none"},
        "policy": {"model": str(model), "max_new_tokens": 6},
        "rollout": {"group_size": 4},
        # the random toy model's answers run to the 6-token budget: trained on as they stand
        "train": {"steps": 3, "batch_size": 3, "lr": 3e-3, "checkpoint_every": 1, "heldout_samples": 2,
                  "truncation": "score", **train},
        "sft": {"enabled": False},
        "monitor": {"tensorboard": False, "report": False},
    }
    return RunConfig.model_validate(data)


def _final(cfg: RunConfig) -> dict:
    return checkpoint.load(str(cfg.run_dir), checkpoint.latest_step(str(cfg.run_dir)))


@pytest.mark.filterwarnings("ignore")
def test_killed_and_resumed_run_equals_uninterrupted(tmp_path: Path, tiny_model_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _cfg(tmp_path, tiny_model_dir, "whole")
    run.train(whole)

    killed = _cfg(tmp_path, tiny_model_dir, "killed")
    real_step, calls = loop.train_step, []

    def dying_step(trainer, step, *rest):
        calls.append(step)
        if step == 2:
            raise KeyboardInterrupt  # killed in the middle of the third step
        return real_step(trainer, step, *rest)

    monkeypatch.setattr(loop, "train_step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        run.train(killed)
    assert checkpoint.latest_step(str(killed.run_dir)) == 2
    monkeypatch.setattr(loop, "train_step", real_step)
    summary = run.train(killed, resume=True)
    assert summary["resumed_from_step"] == 2

    a, b = _final(whole), _final(killed)
    assert a["step"] == b["step"] == 3
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])
    assert a["rng"]["python"] == b["rng"]["python"]
    assert a["scheduler"]["rng"] == b["scheduler"]["rng"]
    assert a["scheduler"]["pass_rates"] == b["scheduler"]["pass_rates"]
    sa, sb = a["updater"]["optimizer"]["state"], b["updater"]["optimizer"]["state"]
    assert all(torch.equal(sa[k]["exp_avg"], sb[k]["exp_avg"]) for k in sa)
    # weights moved, so equality above is not the trivial equality of an untrained model
    assert any(float(v.abs().sum()) > 0 for v in sa.values() for v in [v["exp_avg"]])
    # the replayed step is stored once, not twice
    steps = [ep.step for ep in EpisodeStore(killed.run_dir).episodes()]
    assert sorted(set(steps)) == [0, 1, 2] and steps.count(2) == steps.count(0)
    before = json.loads((whole.run_dir / "summary.json").read_text())
    after = json.loads((killed.run_dir / "summary.json").read_text())
    assert before["pass1_before"] == after["pass1_before"] and before["pass1_after"] == after["pass1_after"]
    assert [p["step"] for p in after["curve"]] == [0, 3]


@pytest.mark.filterwarnings("ignore")
def test_finished_run_is_not_retrained_and_no_resume_starts_over(tmp_path: Path, tiny_model_dir: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    cfg = _cfg(tmp_path, tiny_model_dir, "done", steps=1)
    run.train(cfg)
    first = _final(cfg)
    run.train(cfg, resume=True)
    assert "already complete at step 1" in capsys.readouterr().err
    assert torch.equal(next(iter(first["model"].values())), next(iter(_final(cfg)["model"].values())))
    (cfg.run_dir / "marker").write_text("old run")
    run.train(cfg, resume=False)
    assert not (cfg.run_dir / "marker").exists()
    assert checkpoint.latest_step(str(cfg.run_dir)) == 1


def test_fresh_start_refuses_a_directory_that_is_not_a_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    from rlvr.errors import UserError

    cfg = _cfg(tmp_path, tiny_model_dir, "precious")
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "thesis.tex").write_text("do not delete")
    with pytest.raises(UserError, match="not an rlvr run"):
        run.train(cfg, resume=False)
    assert (cfg.run_dir / "thesis.tex").exists()


def test_corrupt_checkpoint_pointer_is_a_user_error(tmp_path: Path) -> None:
    from rlvr.errors import UserError

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("garbage")
    with pytest.raises(UserError, match="corrupt checkpoint pointer"):
        checkpoint.latest_step(str(tmp_path))
    (tmp_path / "checkpoints" / "latest").write_text("7")
    with pytest.raises(UserError, match="missing"):
        checkpoint.load(str(tmp_path), 7)


def test_quickstart_shaped_smoke_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The real code domain (tiny tier), the bwrap sandbox and the code verifier, on tiny budgets."""
    cfg = load_config(QUICKSTART, [f'output_dir="{tmp_path}"', 'name="smoke"',
                                   f'policy.model="{tiny_model_dir}"',
                                   "policy.max_new_tokens=8", 'tasks.heldout="code:3"', "train.steps=1",
                                   "train.batch_size=2", "rollout.group_size=2", "train.heldout_samples=1",
                                   "sft.steps=2", "sft.examples=8", "sft.batch_size=4",
                                   "monitor.tensorboard=false"])
    summary = run.train(cfg)
    saved = json.loads((cfg.run_dir / "summary.json").read_text())
    for key in ("pass1_before", "pass1_after", "heldout_tasks", "wall_s"):
        assert key in saved
    assert saved["heldout_tasks"] == 3
    assert 0.0 <= saved["pass1_before"] <= 1.0 and 0.0 <= saved["pass1_after"] <= 1.0
    assert (cfg.run_dir / "report.html").is_file() and summary["report"].endswith("report.html")
    assert (cfg.run_dir / "model" / "config.json").is_file()
    eps = EpisodeStore(cfg.run_dir).episodes()
    assert len(eps) == 4 and all(ep.domain == "code" and ep.verdict is not None for ep in eps)
    # each held-out point is an eval report: `rlvr eval --compare` of the SFT start and the RL end
    before, after = (load_report(cfg.run_dir / "heldout" / label) for label in ("before", "after"))
    assert before["domains"]["code"]["pass@1"] == pytest.approx(saved["pass1_before"])
    assert after["domains"]["code"]["pass@1"] == pytest.approx(saved["pass1_after"])
    assert (before["label"] == "before" and before["tasks"] == "code:3"
            and len(before["per_task"]["code"]) == 3)
    diff = compare(before, after)["domains"]["code"]
    assert diff["shared_tasks"] == 3
    assert diff["delta_pass@1"] == pytest.approx(saved["pass1_after"] - saved["pass1_before"])


@pytest.mark.parametrize("override,field", [("train.advantage=gpro", "train.advantage"),
                                            ("train.loss=ppo", "train.loss"),
                                            ("train.loss=gpso", "train.loss"),
                                            ("train.is_correction=mys", "train.is_correction"),
                                            # not decoupled
                                            ("train.is_correction=mis", "train.is_correction"),
                                            ('sft.source="/nonexistent/sft.jsonl"', "sft.source")])
def test_bad_training_settings_exit_2_before_anything_is_written(tmp_path: Path, cli, override: str,
                                                                 field: str) -> None:
    result = cli(["train", f'output_dir="{tmp_path}"', override])
    assert result.code == 2
    assert field in result.stderr and "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())



def test_bf16_mixed_precision_over_weights_not_in_float32_is_refused() -> None:
    from rlvr.errors import UserError

    with pytest.raises(UserError) as err:
        run.validate(RunConfig.model_validate({"policy": {"dtype": "bfloat16"},
                                               "train": {"mixed_precision": "bf16"}}))
    assert err.value.field == "train.mixed_precision" and "policy.dtype" in str(err.value)
    assert "\n" not in str(err.value)
    run.validate(RunConfig.model_validate({"train": {"mixed_precision": "bf16"}}))  # float32 weights: fine


def test_default_heldout_follows_the_procedural_training_domains() -> None:
    from rlvr.run import heldout_tasks

    quick = heldout_tasks(load_config(QUICKSTART))
    assert len(quick) == 200 and {t.domain for t in quick} == {"code"}
    assert all(t.index >= 1_000_000 and t.tier == "tiny" for t in quick)
    math = heldout_tasks(load_config(None, ['tasks.train="math"']))
    assert len(math) == 200 and {t.domain for t in math} == {"math"}
    assert heldout_tasks(load_config(None, ['tasks.heldout=""'])) == []
    assert len(heldout_tasks(load_config(None, ['tasks.heldout="math:5"']))) == 5


@pytest.mark.filterwarnings("ignore")
def test_resuming_under_a_config_that_trains_something_else_is_refused(tmp_path: Path,
                                                                       tiny_model_dir: Path) -> None:
    from rlvr.errors import UserError

    run.train(_cfg(tmp_path, tiny_model_dir, "first", steps=1))
    with pytest.raises(UserError, match="another config") as info:
        run.train(_cfg(tmp_path, tiny_model_dir, "first", steps=1, lr=1e-2), resume=True)
    assert info.value.field == "train.lr"
    # a longer run is fine, and so is one in less memory (the same gradient)
    longer = run.train(_cfg(tmp_path, tiny_model_dir, "first", steps=2, micro_batch_size=2,
                           activation_checkpointing=True), resume=True)
    assert longer["resumed_from_step"] == 1 and _final(_cfg(tmp_path, tiny_model_dir, "first"))["step"] == 2


@pytest.mark.filterwarnings("ignore")
def test_a_checkpoint_of_another_run_state_version_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    from rlvr.errors import UserError
    from rlvr.store.layout import RunLayout

    cfg = _cfg(tmp_path, tiny_model_dir, "old", steps=1)
    run.train(cfg)
    url = RunLayout(str(cfg.run_dir)).checkpoint(1)
    saved = torch.load(url, weights_only=False)
    saved["run_state"]["version"] = 0  # written by an older rlvr
    torch.save(saved, url)
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": 2})})
    with pytest.raises(UserError, match="run state version 0") as err:
        run.train(cfg, resume=True)
    assert err.value.file is not None and "--no-resume" in str(err.value.fix)
    del saved["run_state"]  # the untyped layout of before
    torch.save(saved, url)
    with pytest.raises(UserError, match="run state version None"):
        run.train(cfg, resume=True)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("train",
                         [{"loss": "gspo", "aggregation": "sequence", "clip_low": 3e-4, "clip_high": 4e-4},
                                   {"loss": "cispo", "clip_low": 1.0, "clip_high": 0.28},
                                   {"off_policy": "decoupled", "is_correction": "tis",
                                    "is_level": "sequence"},
                                   {"off_policy": "decoupled", "is_correction": "mis", "is_level": "token"}],
                         ids=["gspo", "cispo", "tis-sequence", "mis-token"])
def test_objectives_and_corrections_train_and_log_the_mismatch(tmp_path: Path, tiny_model_dir: Path,
                                                               train: dict) -> None:
    from rlvr.monitor.monitor import read_metrics
    from rlvr.store.layout import RunLayout

    cfg = _cfg(tmp_path, tiny_model_dir, "objective", steps=2, **train)
    cfg = cfg.model_copy(update={"tasks": cfg.tasks.model_copy(update={"heldout": ""}),  # every group trains
                                 "schedule": cfg.schedule.model_copy(update={"skip_zero_variance": False})})
    run.train(cfg)
    metrics = read_metrics(RunLayout(cfg.run_dir).metrics)
    for step in (0, 1):
        m = metrics[step]
        assert m["train/samples"] > 0 and m["policy/entropy"] > 0
        # the hf sampler and the trainer are the same float32 model: next to no mismatch
        assert 0.0 <= m["mismatch/kl"] < 1e-4
        ratios = [m[f"mismatch/ratio_{q}"] for q in ("p5", "p50", "p95", "max")]
        assert ratios == sorted(ratios)
        assert abs(m["mismatch/ratio_p50"] - 1.0) < 1e-3
    assert _final(cfg)["step"] == 2



class _JudgeDown:
    """A verifier that can never judge: every episode is masked."""

    def verify(self, task: Task, final: FinalState) -> Verdict:
        return Verdict.infra("the judge is down")


@pytest.mark.filterwarnings("ignore")
def test_a_run_whose_episodes_are_mostly_masked_stops_after_three_steps_in_one_line(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.cli import main

    down = "trainloop_down"
    registry.register(Domain(down, lambda _cfg: ListSource(
        [Task(id=f"d{i}", domain=down, prompt=f"say {i}", limits=TaskLimits(max_tokens=4))
         for i in range(20)],
        name=down), verifiers={down: VerifierKind(lambda ctx: _JudgeDown())}))
    try:
        cfg = _cfg(tmp_path, tiny_model_dir, "down", steps=6)
        cfg = cfg.model_copy(update={"tasks": cfg.tasks.model_copy(update={"train": f"{down}:20",
                                                                           "heldout": ""})})
        cfg.write(tmp_path / "conf")
        conf = tmp_path / "conf" / "config.toml"
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["train", str(conf)])
        lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("error:")]
        want = ("error: steps 1-3: most episodes were masked by infra faults in 3 steps in a row; "
                "first: verifier: the judge is down")
        assert code == 1 and lines == [want], err.getvalue()
        steps = sorted({ep.step for ep in EpisodeStore(cfg.run_dir).episodes()})
        assert steps == [0, 1, 2]  # what ran is kept
    finally:
        registry.unregister(down)


@pytest.mark.parametrize("threads,staleness", [(2, 0), (None, 1)])
def test_the_trainer_computes_on_its_own_threads_and_the_rollout_on_the_policys(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, threads: int | None,
        staleness: int) -> None:
    """SFT and a synchronous update run alone (the sandboxes idle): `train.threads`, by default every CPU;
    generation keeps `policy.threads`, and so does an asynchronous update by default (the next rollout runs
    beside it)."""
    from rlvr.rollout.policies.hf import HFPolicy
    from rlvr.train import sft
    from rlvr.train.trainer import usable_cpus
    from rlvr.train.update import PolicyUpdater

    seen: dict[str, set[int]] = {"sft": set(), "update": set(), "generate": set()}

    def recording(name: str, fn):
        def wrapped(*args, **kwargs):
            seen[name].add(torch.get_num_threads())
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(sft, "sft_step", recording("sft", sft.sft_step))
    monkeypatch.setattr(PolicyUpdater, "step", recording("update", PolicyUpdater.step))
    monkeypatch.setattr(HFPolicy, "generate", recording("generate", HFPolicy.generate))
    data = tmp_path / "sft.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"say vowels {i}", "completion": "aeiou"})
                              for i in range(4)))
    cfg = _cfg(tmp_path, tiny_model_dir, f"threads{staleness}", threads=threads, max_staleness=staleness,
               steps=2)
    cfg = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"enabled": True, "source": str(data),
                                                                   "steps": 2, "batch_size": 2})})
    before = torch.get_num_threads()
    run.train(cfg)
    cores = usable_cpus()
    assert seen["sft"] == {threads or cores} and seen["generate"] == {1}
    assert seen["update"] == {threads or 1}
    assert torch.get_num_threads() == before


def test_usable_cpus_follow_the_affinity_and_fall_back_to_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from rlvr.train.trainer import usable_cpus

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert usable_cpus() == 1
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS has no affinity call
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cpus() == 6
