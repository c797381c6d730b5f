"""rlvr tasks out as Harbor tasks (no podman): the layout, task.toml against Harbor's own models, the judge
run on nothing but what the export packs, and refusals that leave nothing written. The built images, and the
import of an export with the same verdicts, are in test_harbor_images.py."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rlvr.domains.harbor.export import export, task_dir_name
from rlvr.domains.harbor.format import load_task, read_config
from rlvr.domains.harbor.settings import HarborSettings
from rlvr.errors import UserError
from rlvr.tasks import registry
from rlvr.tasks.domain import Domain
from rlvr.tasks.selection import resolve
from rlvr.tasks.settings import settings_of
from rlvr.tasks.source import ListSource
from rlvr.tasks.spec import Task
from rlvr.verify.proof import source_of

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "harbor"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Task]]:
    tasks = resolve("code:1,config:1")
    out = tmp_path_factory.mktemp("export") / "harbor"
    assert export(tasks, out) == [task_dir_name(t) for t in tasks]
    return out, tasks


def test_each_task_is_a_harbor_task_directory(exported: tuple[Path, list[Task]]) -> None:
    out, tasks = exported
    code = out / task_dir_name(tasks[0])
    files = {p.relative_to(code).as_posix() for p in code.rglob("*") if p.is_file()}
    assert {"task.toml", "instruction.md", "environment/Dockerfile", "environment/.rlvr/site.zip",
            "tests/Dockerfile", "tests/test.sh", "tests/task.json", "tests/.rlvr/site.zip",
            "solution/solve.sh"} <= files
    assert {f"environment/.rlvr/workspace/{p}" for p in tasks[0].workspace} <= files
    assert not any(p.startswith("environment/") and "task.json" in p for p in files)  # hidden: tests/ only
    assert all(os.access(code / p, os.X_OK) for p in ("tests/test.sh", "solution/solve.sh"))
    env_zip = zipfile.ZipFile(code / "environment" / ".rlvr" / "site.zip").namelist()
    assert not any(n.startswith("rlvr/") for n in env_zip) and any(n.startswith("pytest/") for n in env_zip)
    test_zip = zipfile.ZipFile(code / "tests" / ".rlvr" / "site.zip").namelist()
    assert "rlvr/domains/harbor/judge.py" in test_zip
    assert any(n.startswith("pydantic_core/") for n in test_zip)
    assert any(n.endswith(".dist-info/entry_points.txt") and n.startswith("rlvr-") for n in test_zip)
    assert "jsonschema/__init__.py" in zipfile.ZipFile(out / task_dir_name(tasks[1]) / "tests" / ".rlvr" /
                                                        "site.zip").namelist()  # the config domain's package


def test_task_toml_passes_harbors_models_and_reads_back(exported: tuple[Path, list[Task]]) -> None:
    out, tasks = exported
    for task in tasks:
        d = out / task_dir_name(task)
        cfg = read_config(d)  # Harbor's TaskConfig, no unknown key
        assert cfg.schema_version == "1.4" and cfg.task.name == f"rlvr/{task_dir_name(task)}"
        assert cfg.verifier.environment_mode.value == "separate" and cfg.artifacts == ["/app"]
        assert cfg.agent.timeout_sec == task.limits.wall_s and cfg.metadata["rlvr"]["key"] == task.key
        assert cfg.environment.network_mode.value == "no-network"
        back = load_task(d)
        assert back.image == "dockerfile:environment" and back.prompt.startswith(task.prompt.rstrip())
        assert settings_of(back, HarborSettings).image == "dockerfile:tests"
        record = Task.model_validate_json((d / "tests" / "task.json").read_text())
        assert record == task.model_copy(update={"source": None})  # hidden material, answer: all of it
    assert "answer.txt" in (out / task_dir_name(tasks[1]) / "instruction.md").read_text()  # single-turn
    assert "> answer.txt <<" in (out / task_dir_name(tasks[1]) / "solution" / "solve.sh").read_text()


def _judge(site_zip: Path, task_json: Path, workdir: Path, tmp: Path) -> tuple[int, dict | None]:
    """The exported tests' judge in a fresh venv holding nothing but the zip (as the verifier image does)."""
    venv = tmp / "venv"
    if not venv.exists():
        subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
                        str(venv)], check=True)
        purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        zipfile.ZipFile(site_zip).extractall(purelib)
    logs = tmp / "logs"
    res = subprocess.run([str(venv / "bin" / "python"), "-m", "rlvr.domains.harbor.judge", str(task_json),
                          str(workdir), str(logs)], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp)})
    reward = logs / "reward.json"
    out = json.loads(reward.read_text()) if reward.exists() else None
    reward.unlink(missing_ok=True)
    return res.returncode, out


def test_the_judge_runs_on_the_packed_site_alone(exported: tuple[Path, list[Task]], tmp_path: Path) -> None:
    out, tasks = exported
    task = tasks[0]
    d = out / task_dir_name(task)
    gold, empty = tmp_path / "gold", tmp_path / "empty"
    gold.mkdir()
    empty.mkdir()
    solve = (d / "solution" / "solve.sh").read_text().replace("cd /app", f"cd {gold}")
    subprocess.run(["bash", "-c", solve], check=True)
    expected = source_of(task).gold(task)
    assert {p.relative_to(gold).as_posix(): p.read_text() for p in gold.rglob("*") if p.is_file()} == \
        expected.files
    site, record = d / "tests" / ".rlvr" / "site.zip", d / "tests" / "task.json"
    assert _judge(site, record, gold, tmp_path) == (0, {"reward": 1.0})
    assert _judge(site, record, empty, tmp_path) == (0, {"reward": 0.0})
    verdict = json.loads((tmp_path / "logs" / "verdict.json").read_text())
    assert verdict["passed"] is False and verdict["checks"]


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, cli) -> None:
    harbor_task = load_task(ASSETS / "tasks" / "hello")
    with pytest.raises(UserError, match="a Harbor task already"):
        export([harbor_task], tmp_path / "a")
    archive = Task(id="x", domain="code", prompt="p", image="docker-archive:/nowhere/x.tar")
    with pytest.raises(UserError, match="archive"):
        export([archive], tmp_path / "b")
    registry.names()
    with pytest.raises(UserError, match="not registered"):
        export([Task(id="x", domain="no-such-domain", prompt="p")], tmp_path / "c")
    registry.register(Domain("in-code-only", lambda cfg: ListSource([]), verifier="answer"))
    try:
        with pytest.raises(UserError, match="registered in code"):
            export([Task(id="x", domain="in-code-only", prompt="p", answer="1")], tmp_path / "c")
    finally:
        registry.unregister("in-code-only")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="already exists"):
        export(resolve("code:1"), tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"] and (tmp_path / "d" / "keep.txt").exists()
    for args in (["--format", "harbor", "-o", str(tmp_path / "e"), "--tasks", "code:1", "code:1"],
                 ["--format", "parquet", "-o", str(tmp_path / "e"), "code:1"],
                 ["--format", "harbor", "-o", str(tmp_path / "d"), "code:1"]):
        res = cli(["tasks", "export", *args])
        assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "e").exists()


def test_the_command_writes_the_directory(tmp_path: Path, cli) -> None:
    res = cli(["tasks", "export", "--format", "harbor", "-o", str(tmp_path / "out"), "code:2"])
    assert res.code == 0 and "wrote 2 Harbor tasks" in res.stderr
    assert [read_config(d).metadata["rlvr"]["index"] for d in sorted((tmp_path / "out").iterdir())] == [0, 1]


def test_a_tasks_own_requirements_come_from_where_its_sandbox_gets_them(tmp_path: Path) -> None:
    from rlvr.domains.harbor.site import closure, requirements_site, site_zip

    assert requirements_site(("pytest",)) == ()  # this environment has it: the sandbox runs on it here
    site = tmp_path / "site"  # a venv's site-packages that holds another version, searched first
    (site / "pluggy-0.0.1.dist-info").mkdir(parents=True)
    (site / "pluggy-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: pluggy\n"
                                                               "Version: 0.0.1\n")
    (site / "pluggy-0.0.1.dist-info" / "RECORD").write_text("pluggy/__init__.py,,\n")
    (site / "pluggy").mkdir()
    (site / "pluggy" / "__init__.py").write_text("VENV = True\n")
    found = {d.metadata["Name"]: d.version for d in closure(["pytest"], paths=[str(site)])}
    assert found["pluggy"] == "0.0.1" and "pytest" in found
    with zipfile.ZipFile(io.BytesIO(site_zip(["pytest"], rlvr=False, paths=[str(site)]))) as z:
        assert z.read("pluggy/__init__.py") == b"VENV = True\n"
    with pytest.raises(UserError, match="not installed here"):
        closure(["no-such-package-anywhere"])


def test_a_tree_task_exports_its_tree_and_is_judged_on_it(tmp_path: Path) -> None:
    from rlvr.sandbox.tree import RESTORE, TREE, members

    task = registry.make("shell", families=("git_squash",), tier="medium").get(0)  # a git history
    out = tmp_path / "harbor"
    export([task], out)
    d = out / task_dir_name(task)
    assert f"RUN {RESTORE}" in (d / "environment" / "Dockerfile").read_text()  # the agent sees the tree
    site, record = d / "tests" / ".rlvr" / "site.zip", d / "tests" / "task.json"
    gold, initial = tmp_path / "gold", tmp_path / "initial"
    for where in (gold, initial):
        where.mkdir()
        (where / "stale.txt").write_text("solve.sh starts from an empty WORKDIR")
    solve = (d / "solution" / "solve.sh").read_text().replace("cd /workspace", f"cd {gold}")
    subprocess.run(["bash", "-c", solve], check=True)
    assert (gold / ".git" / "HEAD").is_file() and not (gold / "stale.txt").exists()
    assert (gold / TREE).read_text() == source_of(task).gold(task).files[TREE]  # kept beside the tree
    assert _judge(site, record, gold, tmp_path / "a") == (0, {"reward": 1.0})
    shutil.rmtree(gold / ".rlvr")  # the tree as Harbor's artifact carries it: packed by the judge
    assert _judge(site, record, gold, tmp_path / "b") == (0, {"reward": 1.0})
    verdict = json.loads((tmp_path / "b" / "logs" / "verdict.json").read_text())
    assert verdict["passed"] is True
    (initial / TREE).parent.mkdir()
    (initial / TREE).write_text(task.workspace[TREE])
    subprocess.run(["sh", "-c", RESTORE], cwd=initial, check=True)
    assert ".git/HEAD" in members(task.workspace[TREE])
    assert _judge(site, record, initial, tmp_path / "c") == (0, {"reward": 0.0})
