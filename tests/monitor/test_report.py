"""The run report: one self-contained HTML file, checked in headless Chromium (Debian's chromium package)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from rlvr.monitor.report import MAX_VIEWER_EPISODES, build_report_data, write_report
from rlvr.store import EpisodeStore
from tests.monitor.agentic import FIX_RUN, play
from tests.store.synthetic import episode, write_run

CHROMIUM = "/usr/bin/chromium"
HOSTILE = ("</script><script>document.title='pwned'</script><img src=x "
           "onerror=\"document.title='img'\">&amp;\u2028")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, pool):
    d = tmp_path_factory.mktemp("run")
    write_run(d, plant="flag_rate")
    (d / "config.toml").write_text('name = "run"\n')
    store = EpisodeStore(d)
    store.write(3, [episode(3, "evil", content=HOSTILE, exec_status="timeout", error="TimeoutError: 10s"),
                    episode(3, "broken", infra="sandbox crashed"), play(pool, FIX_RUN, step=3, passed=True)])
    return d


def _data(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html,
                                re.DOTALL)[1])


def test_report_is_self_contained_and_complete(run_dir):
    path = write_report(run_dir)
    html = path.read_text()
    assert path == run_dir / "report.html"
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "nothing may be fetched"
    data = _data(html)
    assert {c["id"] for c in data["charts"]} >= {"pass_rate", "reward", "flags", "length", "sandbox",
                                                  "sandbox_latency", "heldout", "entropy", "phases",
                                                  "agent_use", "agent_errors"}
    assert "eval" not in data and "compare" not in data
    assert data["kind"] == "train" and data["run"]["episodes"] == 12 * 32 + 3 and data["run"]["masked"] == 1
    assert {a["detector"] for a in data["alerts"]} >= {"flag_rate_rising"}
    viewer = {e["id"] for e in data["episodes"]}
    linked = {i for a in data["alerts"] for i in a["episode_ids"]} | {i for c in data["clusters"]
                                                                      for i in c["examples"]}
    assert linked <= viewer and len(viewer) <= MAX_VIEWER_EPISODES
    assert data["clusters"][0]["signature"].startswith(("flag: tampering", "check: IndexError"))


def test_run_text_cannot_break_out_of_the_data(run_dir):
    html = write_report(run_dir).read_text()
    assert HOSTILE not in html and "</script><script>document.title" not in html
    evil = next(e for e in _data(html)["episodes"] if e["task_id"] == "evil")
    assert evil["messages"][2]["content"] == HOSTILE


def test_report_of_an_empty_run(tmp_path, cli):
    res = cli(["report", str(tmp_path)])
    assert res.code == 0, res.stderr
    data = _data((tmp_path / "report.html").read_text())
    assert data["run"]["episodes"] == 0 and data["episodes"] == [] and data["clusters"] == []


def test_cli_report_missing_run(tmp_path, cli):
    res = cli(["report", str(tmp_path / "nope")])
    assert res.code == 2 and "no such run directory" in res.stderr


def test_long_texts_are_clipped_in_the_viewer(tmp_path):
    EpisodeStore(tmp_path).write(0, [episode(0, "t", content="x" * 50_000)])
    [ep] = build_report_data(tmp_path)["episodes"]
    assert (len(ep["messages"][2]["content"]) < 7000
            and "more characters in the store" in ep["messages"][2]["content"])


def _chromium(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)


def test_plots_render_and_the_viewer_shows_an_episode_in_chromium(run_dir, tmp_path):
    path = write_report(run_dir)
    data = _data(path.read_text())
    evil = next(e for e in data["episodes"] if e["task_id"] == "evil")
    flagged = next(e for e in data["episodes"] if e["flags"])
    dom = _chromium(["--dump-dom", f"{path.as_uri()}#episode={evil['id']}"], tmp_path).stdout
    root = re.search(r"<html[^>]*>", dom)[0]
    assert "data-report-error" not in root, root
    ready = re.search(r'data-report-ready="(\d+)"', root)
    assert ready and int(ready[1]) == len(data["charts"]) >= 9
    assert dom.count("<polyline") >= 10 and dom.count('class="band"') == 2
    # The viewer selected the episode from the URL and shows its transcript, verdict checks and tool results,
    # with the hostile text as text: no injected script ran, no injected element exists.
    detail = dom[dom.index('id="ep-detail"'):]
    assert f'data-episode="{evil["id"]}"' in dom[dom.index('id="ep-detail"') - 200:][:400]
    assert "&lt;/script&gt;&lt;script&gt;document.title='pwned'&lt;/script&gt;" in detail
    assert "<title>rlvr run report</title>" in dom and "<img" not in dom
    assert "hidden/test_sol.py::test_a" in detail and ">timeout<" in detail and "Solve task evil." in detail
    # Alert rows link into the viewer.
    assert f'data-episode="{flagged["id"]}"' in dom[dom.index('id="alerts-body"'):dom.index('id="failures"')]
    shot = tmp_path / "report.png"
    _chromium(["--hide-scrollbars", "--window-size=1280,2000", f"--screenshot={shot}", path.as_uri()],
              tmp_path)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one


def _detail(dom: str) -> str:
    return dom[dom.index('id="ep-detail"'):]


def test_the_episode_view_shows_every_turn_with_its_tool_call_and_output_in_chromium(run_dir, tmp_path):
    path = write_report(run_dir)
    agent = next(e for e in _data(path.read_text())["episodes"] if e["task_id"] == "fix-add")
    dom = _chromium(["--dump-dom", f"{path.as_uri()}#episode={agent['id']}"], tmp_path).stdout
    assert "data-report-error" not in re.search(r"<html[^>]*>", dom)[0]
    detail = _detail(dom)
    turns = re.findall(r'<div class="turn" data-turn="(\d+)">', detail)
    assert turns == ["0", "1", "2", "3", "4"]  # the prompt, then one block per model turn
    blocks = re.split(r'<div class="turn" data-turn="\d+">', detail)[1:]
    # turn 1: a native run_tests call and its failing output, marked as a tool error
    assert "Turn 1 · 1 tool call · 1 error" in blocks[1] and "→ run_tests({})" in blocks[1]
    assert "tool result ← run_tests({})" in blocks[1] and "&gt;exit_nonzero&lt;" not in blocks[1]
    assert ">exit_nonzero<" in blocks[1] and ">tool error<" in blocks[1] and "1 failed" in blocks[1]
    # turn 2: a call written as text, parsed as the env parsed it, and the tool's reply
    assert '→ write_file({"path":"sol.py"' in blocks[2] and "[written as text]" in blocks[2]
    assert "wrote sol.py (32 characters)" in blocks[2] and "tool error" not in blocks[2]
    assert ">ok<" in blocks[3] and "1 passed" in blocks[3] and "Turn 3 · 1 tool call<" in blocks[3]
    assert "→ submit({})" in blocks[4] and "submitted" in blocks[4]
    assert "4 turns · 4 tool calls · 1 tool errors · 2 run_tests · 0 malformed calls" in detail
    # the agentic curves are drawn with the others
    assert 'data-chart="agent_use"' in dom and 'data-chart="agent_errors"' in dom


# ----------------------------------------------------------------------------------------------- eval reports
SOLVE_SCRIPT = {"match": [{"prompt_contains": "add", "turns": [
    {"content": "", "tool_calls": [{"name": "run_tests", "arguments": {}}]},
    '<tool_call>{"name": "write_file", "arguments": {"path": "add.py", "content": "def add(a, b):\\n    '
    'return a + b\\n"}}</tool_call>',
    '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "submit"}</tool_call>']}]}
PROSE_SCRIPT = [HOSTILE, "The add function adds."]


@pytest.fixture(scope="module")
def evals(tmp_path_factory):
    """Two evals made by `rlvr eval` (a multi-turn and a single-turn task, k = 2): A solves the multi-turn
    task with its tools and has one more episode, masked by a dead server; B answers in prose."""
    from rlvr.monitor.evals import load_report, report
    from rlvr.rollout.episode import Episode
    from rlvr.store.episodes import open_run
    from tests.conftest import ADD_HIDDEN, ADD_WORKSPACE, _run_cli, write_task

    root = tmp_path_factory.mktemp("evals")
    pack = root / "pack"
    write_task(pack, "add-multi", toml='id = "add-multi"\ndomain = "code"\n[limits]\nmax_turns = 4\n',
               workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    write_task(pack, "add-single",
               toml='id = "add-single"\ndomain = "code"\n[verifier]\nanswer_file = "add.py"\n',
               workspace=ADD_WORKSPACE, hidden=ADD_HIDDEN)
    dirs = []
    for name, script in (("a", SOLVE_SCRIPT), ("b", PROSE_SCRIPT)):
        (root / f"{name}.json").write_text(json.dumps(script))
        res = _run_cli(["eval", "--policy", f"scripted:{root / f'{name}.json'}", "--tasks", str(pack), "-k",
                        "2",
                        "--output-dir", str(root / name), "--json"])
        assert res.code == 0, res.stderr
        [d] = (root / name).glob("*/eval.json")
        dirs.append(d.parent)
    a = dirs[0]
    rep = load_report(a)
    dead = Episode(task_id="add-single", domain="code", sample_index=2, status="infra_error",
                   metadata={"error": "generation failed: after 4 attempts: ConnectError: refused"})
    store = open_run(a)
    store.write(0, [dead])
    extra = {k: v for k, v in rep.items() if k not in report([], k=2, seed=0, policy="", tasks="")}
    extra["planned_episodes"] += 1
    (a / "eval.json").write_text(json.dumps(report(store.episodes(), k=2, seed=0, policy=rep["policy"],
                                                   tasks=rep["tasks"], extra=extra)))
    return dirs


def test_the_report_of_an_eval_shows_the_eval(evals):
    a, _ = evals
    data = build_report_data(a)
    assert data["kind"] == "eval" and data["charts"] == [] and "compare" not in data
    ev = data["eval"]
    assert ev["domains"]["code"]["pass@1"] == 0.5 and ev["domains"]["code"]["pass@1_ci"] == [0.0, 1.0]
    assert ev["mask_reasons"] == {"rollout: ConnectError": 1} and ev["masked_episodes"] == 1
    assert ev["episodes"] == ev["planned_episodes"] == 5 and ev["partial"] is False
    rows = {t["task_id"]: t for t in ev["tasks"]}
    assert (rows["add-multi"]["samples"], rows["add-multi"]["passes"], rows["add-multi"]["masked"]) == (2, 2,
                                                                                                        0)
    assert (rows["add-single"]["samples"], rows["add-single"]["passes"], rows["add-single"]["masked"]) == (2,
                                                                                                           0,
                                                                                                           1)
    assert len(rows["add-single"]["episode_ids"]) == 3
    assert {e["id"] for e in data["episodes"]} == {i for t in ev["tasks"] for i in t["episode_ids"]}
    assert (ev["agent"]["code"]["agent/run_tests_before_pass"] == 2
            and ev["agent"]["code"]["agent/episodes"] == 2)


def test_an_eval_and_its_comparison_render_in_chromium(evals, tmp_path, cli):
    a, b = evals
    res = cli(["report", str(a), "--compare", str(b)])
    assert res.code == 0, res.stderr
    path = a / f"compare-{b.name}.html"
    html = path.read_text()
    assert HOSTILE not in html and not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    data = _data(html)
    diff = data["compare"]["diff"]["domains"]["code"]
    assert diff["delta_pass@1"] == -0.5 and diff["shared_tasks"] == 2
    solved = next(e for e in data["episodes"] if e["run"] == "A" and e["task_id"] == "add-multi")
    dom = _chromium(["--dump-dom", f"{path.as_uri()}#episode={solved['id']}"], tmp_path).stdout
    root = re.search(r"<html[^>]*>", dom)[0]
    assert "data-report-error" not in root and 'data-report-kind="eval"' in root, root
    assert (f"rlvr eval report: {a.name}" in dom and "<img" not in dom
            and "document.title='pwned'" not in dom[:300])
    # no learning curves of one dot each: the training sections are hidden, and no chart is drawn
    assert re.search(r'<section id="learning" data-kind="train" hidden', dom) and 'class="plot"' not in dom

    def section(name: str) -> str:
        start = dom.index(f'<section id="{name}"')
        return dom[start:dom.index("</section>", start)]

    results = section("eval-results")
    assert "pass@1 [95% CI]" in results and "pass@2 [95% CI]" in results
    assert "50.0% [0.0, 100.0]" in results and results.count('class="ci-dot"') == 2
    masked = section("eval-masked")
    assert "rollout: ConnectError" in masked and "1 of 5 episodes masked" in masked
    assert "B (" in masked and "no episode was masked" in masked
    tasks = section("eval-tasks")
    assert "add-multi" in tasks and "2/2" in tasks and "0/2" in tasks and "✔ #0" in tasks and "⚠ #2" in tasks
    side = section("eval-compare")
    assert "B − A pass@1 [95% CI]" in side and "-50.0% [" in side and "-100 pts" in side
    assert side.count('class="ci-dot"') == 2
    agent = section("eval-agent")
    assert "A · code" in agent and "B · code" in agent and "100.0%" in agent  # B never called a tool
    # the transcript of the selected episode, turn by turn, and B's hostile prose as text
    detail = _detail(dom)
    assert re.findall(r'data-turn="(\d+)"', detail) == ["0", "1", "2", "3",
                                                        "4"] and "→ run_tests({})" in detail
    prose = next(e for e in data["episodes"] if e["run"] == "B" and e["task_id"] == "add-multi")
    dom_b = _chromium(["--dump-dom", f"{path.as_uri()}#episode={prose['id']}"], tmp_path).stdout
    detail_b = _detail(dom_b)
    assert "&lt;/script&gt;&lt;script&gt;document.title='pwned'&lt;/script&gt;" in detail_b
    assert "Turn 1 · 0 tool calls" in detail_b and "No tool call found" in detail_b


def test_report_compare_needs_two_evals(run_dir, evals, cli, tmp_path):
    res = cli(["report", str(run_dir), "--compare", str(evals[1])])
    assert res.code == 2 and "holds no eval.json" in res.stderr
    res = cli(["report", str(evals[0]), "--compare", str(tmp_path)])
    assert res.code == 2 and "no eval report" in res.stderr
    res = cli(["report", str(evals[0]), "-o", str(tmp_path / "a.html")])
    assert res.code == 0 and _data((tmp_path / "a.html").read_text())["kind"] == "eval"
