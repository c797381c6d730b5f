"""`rlvr eval` end to end: scripted and hf policies, config files, the store, stops, masked evals."""
from __future__ import annotations

import json

import pytest

from tests.conftest import ADD_HIDDEN, ADD_WORKSPACE, write_task

SOLVE = "def add(a, b):\n    return a + b\n"


@pytest.fixture
def pack(tmp_path):
    root = tmp_path / "pack"
    write_task(root, "add-multi", toml='id = "add-multi"\ndomain = "code"\n[limits]\nmax_turns = 4\n',
               workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    write_task(root, "add-single",
               toml='id = "add-single"\ndomain = "code"\n[verifier]\nanswer_file = "add.py"\n',
               workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    write_call = json.dumps({"name": "write_file", "arguments": {"path": "add.py", "content": SOLVE}})
    script = {"match": [{"prompt_contains": "add", "turns": [f"<tool_call>{write_call}</tool_call>",
                                                             '<tool_call>{"name": "submit"}</tool_call>']}]}
    (tmp_path / "solve.json").write_text(json.dumps(script))
    return root


def test_eval_end_to_end_scripted_then_hf_then_compare(cli, pack, tmp_path, tiny_dir, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli(["eval", "--policy", f"scripted:{tmp_path / 'solve.json'}", "--tasks", str(pack), "-k", "2",
               "--json"])
    assert res.code == 0, res.stderr
    good = json.loads(res.stdout)
    code = good["domains"]["code"]
    # the multi-turn task is solved by the tool calls; the single-turn answer is the tool-call text, not code
    assert (code["n"], code["samples"], code["pass@1"], code["pass@k"]) == (2, 4, 0.5, 0.5)
    assert good["per_task"]["code"] == {"add-multi": [2, 2], "add-single": [2, 0]}
    res = cli(["eval", "--policy", f"hf:{tiny_dir}", "--tasks", f"{pack}:1", "-k", "2", "--json"])
    assert res.code == 0, res.stderr
    weak = json.loads(res.stdout)
    assert weak["domains"]["code"]["n"] == 1 and weak["domains"]["code"]["pass@1"] == 0.0
    runs = sorted(p.parent for p in (tmp_path / "runs" / "eval").glob("*/eval.json"))
    assert len(runs) == 2
    res = cli(["eval", "--compare", str(runs[0]), "--compare", str(runs[1])])
    assert res.code == 0 and "code" in res.stdout
    res = cli(["eval", "--compare", str(runs[0]), str(runs[1]), "--json"])
    assert json.loads(res.stdout)["domains"]["code"]["shared_tasks"] == 1


def test_with_k_1_the_table_has_one_pass_at_1_column(cli, pack, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for k, want in (("1", ["pass@1 [95% CI]"]), ("2", ["pass@1 [95% CI]", "pass@2 [95% CI]"])):
        res = cli(["eval", "--policy", f"scripted:{tmp_path / 'solve.json'}", "--tasks", str(pack), "-k", k])
        assert res.code == 0, res.stderr
        header = res.stdout.splitlines()[0].split("\t")  # piped: plain tab-separated lines
        assert [h for h in header if h.startswith("pass@")] == want
    runs = sorted(p.parent for p in (tmp_path / "runs" / "eval").glob("*/eval.json"))
    res = cli(["eval", "--compare", str(runs[0]), str(runs[0])])  # k = 1 and 2: compared at 1
    assert [h for h in res.stdout.splitlines()[0].split("\t") if "pass@" in h] == [
        "A pass@1", "B pass@1", "B-A pass@1 [95% CI]"]


@pytest.mark.parametrize("args, message", [
    (["eval"], "give --policy and --tasks"),
    (["eval", "--policy", "scripted:/nope.json", "--tasks", "code:1"], "no such script file"),
    (["eval", "--policy", "magic:x", "--tasks", "code:1"], "bad policy spec"),
    (["eval", "--compare", "a"], "--compare takes two"),
    (["eval", "--compare", "a", "b", "c"], "--compare takes two"),
    (["eval", "stray"], "unexpected argument 'stray'"),
    (["eval", "--policy", "builtin:tiny", "--tasks", "nodomain"], "unknown domain"),
])
def test_eval_bad_input_is_one_line(cli, args, message, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli(args)
    assert res.code == 2 and message in res.stderr and res.stderr.count("\n") == 1


def _eval_dirs(tmp_path):
    return sorted((tmp_path / "runs" / "eval").glob("*"))


def test_eval_options_config_store_and_report(cli, pack, tmp_path, monkeypatch) -> None:
    from rlvr.store.episodes import open_run

    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "eval.toml"
    conf.write_text(f'[policy]\nbackend = "scripted"\nmodel = "{tmp_path / "solve.json"}"\n'
                    f'temperature = 0.7\n'
                    'max_new_tokens = 300\n[rollout]\nconcurrency = 2\n')
    res = cli(["eval", "--config", str(conf), "--tasks", str(pack), "-k", "2", "--temperature", "0",
               "--top-p", "0.9", "--max-turns", "3", "--json"])
    assert res.code == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["sampling"] == {"temperature": 0.0, "top_p": 0.9, "max_new_tokens": 300, "max_turns": 3}
    assert (rep["partial"] is False and rep["stopped"] is None
            and rep["episodes"] == rep["planned_episodes"] == 4)
    assert "4/4 episodes" in res.stderr  # the progress bar is on stderr, with --json too
    [run] = _eval_dirs(tmp_path)
    assert (tmp_path / rep["store"]) == run
    assert (run / "eval.json").is_file() and (run / "config.toml").is_file()
    stored = open_run(run).episodes()
    passed = sorted(bool(e.passed) for e in stored)
    assert len(stored) == 4 and passed == [False, False, True, True], passed
    assert max(e.num_turns for e in stored) <= 3
    res = cli(["query", str(run), "SELECT count(*) AS n, count_if(passed) AS p FROM episodes", "--json"])
    [row] = json.loads(res.stdout)
    assert (int(row["n"]), int(row["p"])) == (4, 2)
    res = cli(["report", str(run)])
    assert res.code == 0, res.stderr
    html = (run / "report.html").read_text()
    assert "write_file" in html and "add-multi" in html  # the transcripts are in the viewer's data
    res = cli(["failures", str(run), "--json"])
    assert res.code == 0 and sum(c["count"] for c in json.loads(res.stdout)) == 2


class _Slow:
    """Wraps ScriptedPolicy.generate: sleeps before each call, or raises KeyboardInterrupt at call
    `stop_at`."""

    def __init__(self, monkeypatch, sleep_s: float = 0.0, stop_at: int | None = None) -> None:
        from rlvr.rollout.policies.scripted import ScriptedPolicy

        self.calls, self.orig = 0, ScriptedPolicy.generate
        self.sleep_s, self.stop_at = sleep_s, stop_at
        monkeypatch.setattr(ScriptedPolicy, "generate", lambda policy, *a, **kw: self(policy, *a, **kw))

    def __call__(self, policy, *args, **kw):
        import time

        self.calls += 1
        if self.stop_at is not None and self.calls >= self.stop_at:
            raise KeyboardInterrupt
        time.sleep(self.sleep_s)
        return self.orig(policy, *args, **kw)


@pytest.mark.parametrize("how", ["time limit", "interrupted"])
def test_a_stopped_eval_writes_the_partial_report(cli, pack, tmp_path, monkeypatch, how) -> None:
    from rlvr.store.episodes import open_run

    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "one.toml"
    conf.write_text("[rollout]\nconcurrency = 1\n")
    args = ["eval", "--policy", f"scripted:{tmp_path / 'solve.json'}", "--tasks", str(pack), "-k", "8",
            "--config", str(conf)]
    if how == "time limit":
        _Slow(monkeypatch, sleep_s=0.25)
        res = cli([*args, "--time-limit", "1.5"])
        assert res.code == 0 and "partial report (time limit of 1.5 s)" in res.stderr, res.stderr
    else:  # Ctrl-C during the fourth generation call
        _Slow(monkeypatch, stop_at=4)
        res = cli(args)
        assert res.code == 130 and "partial report (interrupted)" in res.stderr, res.stderr
    [run] = _eval_dirs(tmp_path)
    rep = json.loads((run / "eval.json").read_text())
    assert rep["partial"] is True and rep["stopped"] == how and rep["planned_episodes"] == 16
    assert 0 < rep["episodes"] < 16 and rep["wall_s"] < 10
    assert sum(r["samples"] + r["masked_episodes"] for r in rep["domains"].values()) == rep["episodes"]
    assert len(open_run(run).episodes()) == rep["episodes"]


@pytest.mark.parametrize("args, message", [
    (["--temperature", "-1"], "policy.temperature"),
    (["--top-p", "2"], "policy.top_p"),
    (["--max-turns", "0"], "rollout.max_turns"),
    (["--time-limit", "0"], "--time-limit"),
    (["--config", "/nope.toml"], "no such config file"),
])
def test_eval_bad_options_are_one_line_and_leave_nothing(cli, pack, tmp_path, monkeypatch, args,
                                                         message) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli(["eval", "--policy", f"scripted:{tmp_path / 'solve.json'}", "--tasks", str(pack), *args])
    assert res.code == 2 and message in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert _eval_dirs(tmp_path) == []


def test_the_example_eval_configs_load() -> None:
    from pathlib import Path

    from rlvr.config import load_config

    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*eval*.toml"))
    assert examples
    for path in examples:
        cfg = load_config(path)
        assert cfg.tasks.heldout and cfg.policy.max_new_tokens <= 64


def test_an_eval_of_a_dead_policy_server_says_why_keeps_the_report_and_fails(cli, tmp_path,
                                                                             monkeypatch) -> None:
    """It used to report 0 samples with "-" and exit 0."""
    monkeypatch.chdir(tmp_path)
    res = cli(["eval", "--policy", "openai:http://127.0.0.1:9/v1#m", "--tasks", "math:3", "-k", "1",
               "--json"])
    assert res.code == 1, res.stderr
    [line] = [ln for ln in res.stderr.splitlines() if ln.startswith("eval failed:")]
    assert line.startswith("eval failed: 3 of 3 episodes were masked by infra faults; first: rollout: ")
    assert "ConnectError" in line
    [run] = _eval_dirs(tmp_path)  # the partial report is kept
    rep = json.loads((run / "eval.json").read_text())
    assert rep["masked_episodes"] == 3 and rep["mask_reasons"] == {"rollout: ConnectError": 3}
    assert json.loads(res.stdout)["first_mask_error"] == rep["first_mask_error"]


def test_only_an_eval_mostly_masked_fails() -> None:
    from rlvr.commands.eval import mostly_masked

    assert not mostly_masked({"episodes": 4, "masked_episodes": 2})  # half judged: the figures still stand
    assert mostly_masked({"episodes": 4, "masked_episodes": 3})
    assert not mostly_masked({"episodes": 0, "masked_episodes": 0})  # nothing ran (a stopped eval says so)


def test_an_eval_writing_to_a_log_shows_progress_lines_while_it_runs(cli, pack, tmp_path,
                                                                     monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLVR_PROGRESS_INTERVAL_S", "0.1")
    _Slow(monkeypatch, sleep_s=0.2)
    conf = tmp_path / "one.toml"
    conf.write_text("[rollout]\nconcurrency = 1\n")
    res = cli(["eval", "--policy", f"scripted:{tmp_path / 'solve.json'}", "--tasks", str(pack), "-k", "2",
               "--config", str(conf)])
    assert res.code == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("eval: ")]
    assert len(lines) >= 3 and lines[-1].startswith("eval: 4/4 episodes, passed 2"), res.stderr


ATTEMPTS_TOML = '''id = "{name}"
domain = "code"
attempts = true
[limits]
max_turns = 2
max_tokens = 64
[verifier]
answer_file = "solution.py"
answer_template = "def f(xs):\\n    return {{answer}}\\n"
visible_io = "examples.txt"
[verifier.io]
file = "io_cases.txt"
entry = "solution:f"
partial = false
'''


def test_eval_of_attempts_tasks_reports_the_loop(cli, tmp_path, monkeypatch) -> None:
    """An on-disk attempts task: a scripted policy answers xs[0], is told what failed, answers max(xs)."""
    root = tmp_path / "loop-pack"
    for name, visible, hidden in (
            ("wants-max", "(([3, 1, 2],), 3)\n(([1, 5],), 5)\n", "(([2, 9, 4],), 9)\n(([7, 0],), 7)\n"),
            ("wants-first", "(([3, 1, 2],), 3)\n(([4, 9],), 4)\n", "(([2, 9, 4],), 2)\n(([7, 0],), 7)\n")):
        write_task(root, name, toml=ATTEMPTS_TOML.format(name=name),
                   prompt="def f(xs):\n    # f([3,1,2])=3\n", workspace={"examples.txt": visible},
                   hidden={"io_cases.txt": hidden})
    (tmp_path / "loop.json").write_text(json.dumps(["xs[0]", "max(xs)"]))
    monkeypatch.chdir(tmp_path)
    res = cli(["eval", "--policy", f"scripted:{tmp_path / 'loop.json'}", "--tasks", str(root), "-k", "2"])
    assert res.code == 0, res.stderr
    assert "loop" in res.stdout and "recovery" in res.stdout  # the loop's table (cells wrap when narrow)
    [run_dir] = [p.parent for p in (tmp_path / "runs" / "eval").glob("*/eval.json")]
    rep = json.loads((run_dir / "eval.json").read_text())
    loop = rep["domains"]["code"]["loop"]
    assert rep["domains"]["code"]["pass@1"] == 1.0  # both pass: one at once, one after reading the failure
    assert (loop["episodes"], loop["first_attempt_pass"], loop["recovery_rate"], loop["attempts"]) == (
        4, 0.5, 1.0, 1.5)
    assert rep["per_task_loop"]["code"]["wants-max"]["recoveries"] == 2
    res = cli(["report", str(run_dir)])
    assert res.code == 0 and "eval-loop" in (run_dir / "report.html").read_text()
