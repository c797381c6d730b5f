"""Reading Harbor task directories (no podman): task.toml through Harbor's own models, what rlvr derives from
each part, and every refusal as one line naming the file and the field."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlvr.domains.harbor.format import load_task, read_config, strip_canary
from rlvr.domains.harbor.settings import HarborSettings
from rlvr.domains.harbor.source import HarborSource
from rlvr.errors import UserError
from rlvr.sandbox.base import environment_of
from rlvr.tasks.selection import lookup, parse
from rlvr.tasks.settings import settings_of

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "harbor"
TASKS = ASSETS / "tasks"
TEMPLATE = ASSETS / "template-task"


def _task(tmp_path: Path, toml: str, *, name: str = "t", extra: dict[str, str] | None = None) -> Path:
    """A Harbor task directory with `toml` as its task.toml (and an environment, tests and instruction)."""
    d = tmp_path / name
    files = {"task.toml": toml, "instruction.md": "Do it.\n",
             "environment/Dockerfile": "FROM debian:bookworm-slim\n",
             "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n", **(extra or {})}
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def test_the_template_task_of_the_harbor_wheel_reads_with_harbors_models() -> None:
    cfg = read_config(TEMPLATE)
    assert type(cfg).__module__ == "rlvr.domains.harbor.upstream.harbor.models.task.config"
    assert cfg.schema_version == "1.4" and cfg.verifier.timeout_sec == 900.0
    task = load_task(TEMPLATE)
    assert task.domain == "harbor" and task.id == "template-task" and task.prompt == ""
    assert task.image == "dockerfile:environment" and task.network is False  # unset network_mode: none
    assert environment_of(task) == {"image": f"dockerfile:{TEMPLATE / 'environment'}"}
    assert task.limits.wall_s == 900.0 and task.limits.max_turns > 1  # the model acts over many turns
    s = settings_of(task, HarborSettings)
    assert s.mode == "shared" and s.timeout_s == 900.0 and s.image is None


def test_each_part_of_a_task_maps_to_the_rlvr_task() -> None:
    hello = load_task(TASKS / "hello")
    assert hello.prompt.startswith("Create the file `/app/hello.txt`")  # the canary line is gone
    assert hello.limits.wall_s == 120.0 and hello.limits.memory_mb == 512 and hello.difficulty == 0.25
    assert hello.metadata["harbor"]["task"]["name"] == "rlvr/hello"
    assert hello.hidden == {} and hello.workspace == {}  # tests stay on disk; the workspace is the image's
    s = settings_of(hello, HarborSettings)
    assert (s.mode, s.timeout_s, s.network) == ("shared", 60.0, False)
    partial = settings_of(load_task(TASKS / "partial"), HarborSettings)
    assert partial.env == {"EXPECTED_GREETING": "Hello"}
    separate = settings_of(load_task(TASKS / "separate"), HarborSettings)
    assert (separate.mode, separate.image) == ("separate", "dockerfile:tests")
    assert separate.artifacts == ("/app/out.txt",)


def test_the_tasks_spec_names_one_task_or_a_directory_of_them() -> None:
    (sel,) = parse(f"harbor:{TASKS}")
    assert sel.source.size == 3 and list(sel.source.ids()) == ["hello", "partial", "separate"]
    (sel,) = parse(f"harbor:{TASKS}:2")
    assert sel.n == 2 and len(sel.tasks()) == 2
    assert lookup(f"harbor:{TASKS / 'hello'}").id == "hello"
    with pytest.raises(UserError, match="names several tasks"):
        lookup(f"harbor:{TASKS}")
    with pytest.raises(UserError, match="reads no tasks from a path"):
        parse("code:somewhere")
    with pytest.raises(UserError, match="no Harbor task here"):
        HarborSource(ASSETS / "tasks" / "hello" / "tests")


def test_the_cli_lists_shows_and_refuses_in_one_line(cli, tmp_path: Path) -> None:
    res = cli(["tasks", "list", f"harbor:{TASKS}", "--json"])
    assert res.code == 0 and '"hello"' in res.stdout and '"separate"' in res.stdout
    res = cli(["tasks", "show", f"harbor:{TASKS / 'hello'}", "--json"])
    assert res.code == 0 and '"domain": "harbor"' in res.stdout
    bad = _task(tmp_path, 'schema_version = "1.4"\n[verifier]\ntimout_sec = 5.0\n')
    res = cli(["tasks", "show", f"harbor:{bad}"])
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "verifier.timout_sec" in res.stderr and "timeout_sec" in res.stderr and str(bad) in res.stderr


@pytest.mark.parametrize("toml, field", [
    ('schema_version = "2.0"\n', "schema_version"),
    ('schema_version = "1.4"\nflavour = "x"\n', "flavour"),
    ('[environment]\ncpus = 1\nmemroy_mb = 5\n', "environment.memroy_mb"),
    ('[verifier.environment]\ndocker_imag = "x"\n', "verifier.environment.docker_imag"),
    ('[[environment.mcp_servers]]\nname = "m"\nurl = "http://x"\ncolour = 1\n',
     "environment.mcp_servers[0].colour"),
    ('[verifier]\ntimeout_sec = "soon"\n', "verifier.timeout_sec"),
    ('[[steps]]\nname = "one"\n', "steps"),
    ('[environment]\nos = "windows"\n', "environment.os"),
    ('[environment]\ngpus = 1\n', "environment.gpus"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["example.com"]\n',
     "environment.network_mode"),
    ('[agent]\nuser = "root"\n', "agent.user"),
    ('[verifier]\nuser = 1000\n', "verifier.user"),
    ('[environment]\nworkdir = "/src"\n', "environment.workdir"),
    ('[environment.env]\nA = "1"\n', "environment.env"),
    ('[verifier.env]\nKEY = "${OPENAI_API_KEY}"\n', "verifier.env.KEY"),
    ('[[verifier.collect]]\ncommand = "true"\n', "verifier.collect"),
    ('[environment]\nhealthcheck = { command = "true" }\n', "environment.healthcheck"),
    ('[environment]\ndocker_image = "Not A Reference"\n', "environment.docker_image"),
    ('[environment]\ndocker_image = "dockerfile:/elsewhere"\n', "environment.docker_image"),
])
def test_what_rlvr_cannot_read_or_run_is_refused_in_one_line(tmp_path: Path, toml: str, field: str) -> None:
    d = _task(tmp_path, toml)
    if "docker_image" in toml:
        (d / "environment" / "Dockerfile").unlink()
    with pytest.raises(UserError) as exc:
        load_task(d)
    assert exc.value.field == field, str(exc.value)
    assert exc.value.file is not None and str(d) in exc.value.file
    assert "\n" not in str(exc.value) and exc.value.fix


@pytest.mark.parametrize("layout, what", [
    ({"environment/docker-compose.yaml": "services: {}\n"}, "multi-container"),
    ({"instruction.md": None}, "missing instruction.md"),
    ({"tests/test.sh": None}, "missing tests/test.sh"),
    ({"environment/Dockerfile": None}, "no environment"),
    ({"task.toml": "schema_version = \n"}, "TOML syntax error"),
])
def test_a_task_directory_missing_a_part_is_refused(tmp_path: Path, layout: dict, what: str) -> None:
    d = _task(tmp_path, 'schema_version = "1.4"\n')
    for rel, text in layout.items():
        if text is None:
            (d / rel).unlink()
        else:
            (d / rel).write_text(text)
    with pytest.raises(UserError, match=what):
        load_task(d)


def test_older_keys_harbor_still_reads_are_accepted(tmp_path: Path) -> None:
    d = _task(tmp_path, 'version = "1.0"\n[environment]\nmemory = "1G"\nstorage = "2G"\n'
              'allow_internet = true\n')
    with pytest.warns(DeprecationWarning):
        task = load_task(d)
    assert task.limits.memory_mb == 1024 and task.network is True  # allow_internet: Harbor's public


def test_network_follows_the_phase_and_the_environment(tmp_path: Path) -> None:
    toml = ('[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "no-network"\n'
            '[verifier]\nnetwork_mode = "public"\n')
    task = load_task(_task(tmp_path, toml))
    assert task.network is False and settings_of(task, HarborSettings).network is True
    task = load_task(_task(tmp_path, '[environment]\nnetwork_mode = "public"\n', name="u"))
    assert task.network is True and settings_of(task, HarborSettings).network is True


def test_a_registry_image_and_a_separate_verifier_image(tmp_path: Path) -> None:
    d = _task(tmp_path, '[environment]\ndocker_image = "debian:bookworm-slim"\n'
              '[verifier.environment]\ndocker_image = "ghcr.io/x/verifier:1"\n')
    (d / "environment" / "Dockerfile").unlink()
    (d / "tests" / "test.sh").unlink()  # its tests are the verifier image's own
    task = load_task(d)
    s = settings_of(task, HarborSettings)
    assert task.image == "debian:bookworm-slim" and (s.mode, s.image) == ("separate", "ghcr.io/x/verifier:1")
    shutil.rmtree(d)
    d = _task(tmp_path, '[verifier]\nenvironment_mode = "separate"\n')
    assert settings_of(load_task(d), HarborSettings).image == "dockerfile:environment"  # a fresh copy


def test_canary_lines_are_stripped_as_harbor_does() -> None:
    text = "<!-- BENCHMARK DATA canary GUID 1 -->\n# canary string x\n\nDo the thing.\n# canary later stays\n"
    assert strip_canary(text) == "Do the thing.\n# canary later stays\n"


def test_validate_reports_a_bad_task_in_its_row_and_exits_2(cli, tmp_path: Path) -> None:
    _task(tmp_path, 'schema_version = "9"\n', name="bad")
    _task(tmp_path, '[agent]\nuser = "root"\n', name="worse")
    res = cli(["tasks", "validate", f"harbor:{TEMPLATE}", "--json"])
    assert res.code == 2 and "instruction.md" in res.stdout  # the wheel's template: its instruction is empty
    res = cli(["tasks", "validate", f"harbor:{tmp_path}", "--json"])
    rows = {r["task"]: r for r in json.loads(res.stdout)["tasks"]}
    assert res.code == 2 and not rows["bad"]["ok"] and "schema_version" in rows["bad"]["detail"]
    assert not rows["worse"]["ok"] and "agent.user" in rows["worse"]["detail"]
