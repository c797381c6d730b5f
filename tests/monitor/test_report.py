"""The run report: one self-contained HTML file, checked in headless Chromium (Debian's chromium package)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from rlvr.monitor.report import MAX_VIEWER_EPISODES, build_report_data, write_report
from rlvr.store import EpisodeStore
from tests.store.synthetic import episode, write_run

CHROMIUM = "/usr/bin/chromium"
HOSTILE = "</script><script>document.title='pwned'</script><img src=x onerror=\"document.title='img'\">&amp;\u2028"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    write_run(d, plant="flag_rate")
    (d / "config.toml").write_text('name = "run"\n')
    store = EpisodeStore(d)
    store.write(3, [episode(3, "evil", content=HOSTILE, exec_status="timeout", error="TimeoutError: 10s"),
                    episode(3, "broken", infra="sandbox crashed")])
    return d


def _data(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.DOTALL)[1])


def test_report_is_self_contained_and_complete(run_dir):
    path = write_report(run_dir)
    html = path.read_text()
    assert path == run_dir / "report.html"
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "nothing may be fetched"
    data = _data(html)
    assert {c["id"] for c in data["charts"]} >= {"pass_rate", "reward", "flags", "length", "sandbox",
                                                  "sandbox_latency", "heldout", "entropy", "phases"}
    assert data["run"]["episodes"] == 12 * 32 + 2 and data["run"]["masked"] == 1
    assert {a["detector"] for a in data["alerts"]} >= {"flag_rate_rising"}
    viewer = {e["id"] for e in data["episodes"]}
    linked = {i for a in data["alerts"] for i in a["episode_ids"]} | {i for c in data["clusters"] for i in c["examples"]}
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
    assert len(ep["messages"][2]["content"]) < 7000 and "more characters in the store" in ep["messages"][2]["content"]


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
    _chromium(["--hide-scrollbars", "--window-size=1280,2000", f"--screenshot={shot}", path.as_uri()], tmp_path)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
