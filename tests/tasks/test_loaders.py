"""Loaders: task directories, packs, JSONL packs, laziness, and every malformed-input case."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.conftest import write_task

from rlvr.domains.code.settings import CODE_PROTECTED_DEFAULT
from rlvr.errors import UserError
from rlvr.tasks.loaders import JsonlPack, TaskDirPack, load_task_dir, open_path


def test_bare_code_task_defaults(add_task: Path) -> None:
    task = load_task_dir(add_task)
    assert task.id == "add" and task.domain == "code"
    assert task.prompt == "Write add(a, b)."
    assert set(task.workspace) == {"add.py", "test_visible.py"}
    assert task.verifier["tests"] == ["test_hidden.py"]
    assert task.solution == {"add.py": "def add(a, b):\n    return a + b\n"}
    for pattern in CODE_PROTECTED_DEFAULT:
        assert pattern in task.protected
    assert task.source == str(add_task)


def test_task_toml_full(tmp_path: Path) -> None:
    toml = ('id = "t1"\ndomain = "code"\ndifficulty = 0.3\ntier = "easy"\nprotected = ["data/*"]\n'
            '[verifier]\ntests = ["test_x.py"]\nweights = { "test_x.py::test_a" = 2.0 }\n'
            '[limits]\nmax_turns = 6\nexec_timeout_s = 3\n')
    d = write_task(tmp_path, "t1", toml=toml, hidden={"test_x.py": "def test_a(): pass\n"})
    task = load_task_dir(d)
    assert task.limits.max_turns == 6 and task.multi_turn
    assert task.verifier["weights"] == {"test_x.py::test_a": 2.0}
    assert "data/*" in task.protected and "conftest.py" in task.protected
    assert task.difficulty == 0.3 and task.tier == "easy"


def test_hidden_tests_default_in_subdirs(tmp_path: Path) -> None:
    d = write_task(tmp_path, "t", hidden={"tests/test_deep.py": "x", "helper.py": "y", "test_top.py": "z"})
    assert load_task_dir(d).verifier["tests"] == ["test_top.py", "tests/test_deep.py"]


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('id = "x"\ndomain = "code"\nbogus = 1\n', "bogus"),
        ('id = "x"\ndomain = "code"\ndifficulty = "hard"\n', "difficulty"),
        ('id = "x"\n', "domain"),
        ('id = "x"\ndomain = "code"\n[limits]\nmax_turns = 0\n', "limits.max_turns"),
        ('id = "x"\ndomain = "code"\n[limits]\nturns = 3\n', "limits.turns"),
        ('id = "x" domain = "code"\n', "TOML syntax error"),
        ('id = "x"\ndomain = "code"\nprompt = "inline"\n', "prompt"),
        ('id = ""\ndomain = "code"\n', "id"),
    ],
)
def test_malformed_task_toml(tmp_path: Path, toml: str, needle: str) -> None:
    d = write_task(tmp_path, "x", toml=toml)
    with pytest.raises(UserError) as exc:
        load_task_dir(d)
    msg = str(exc.value)
    assert "task.toml" in msg and needle in msg
    assert "\n" not in msg


def test_missing_task_toml_and_dir(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="missing task.toml"):
        load_task_dir(tmp_path / "empty")
    with pytest.raises(UserError, match="no such task directory"):
        load_task_dir(tmp_path / "nope")


def test_symlink_and_binary_refused(tmp_path: Path) -> None:
    d = write_task(tmp_path, "s", workspace={"a.py": "x"})
    (d / "workspace" / "link.py").symlink_to("/etc/passwd")
    with pytest.raises(UserError, match="symlink"):
        load_task_dir(d)
    d2 = write_task(tmp_path, "b")
    (d2 / "workspace").mkdir()
    (d2 / "workspace" / "blob.bin").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(UserError, match="UTF-8"):
        load_task_dir(d2)


def test_pack_is_lazy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(10_000):
        (tmp_path / f"t{i:05d}").mkdir()
    # no task.toml anywhere: listing must not open any file
    opened: list[str] = []
    real_open = Path.open

    def spy(self: Path, *a, **kw):  # type: ignore[no-untyped-def]
        opened.append(str(self))
        return real_open(self, *a, **kw)

    monkeypatch.setattr(Path, "open", spy)
    t0 = time.perf_counter()
    pack = TaskDirPack(tmp_path)
    ids = list(pack.ids())
    elapsed = time.perf_counter() - t0
    assert len(ids) == 10_000 and ids[0] == "t00000" and pack.size == 10_000
    assert opened == []
    assert elapsed < 5  # generous; the point is that nothing is read


def test_pack_loads_members(tmp_path: Path) -> None:
    write_task(tmp_path, "a", hidden={"test_a.py": "def test(): pass\n"})
    write_task(tmp_path, "b", hidden={"test_b.py": "def test(): pass\n"})
    pack = open_path(tmp_path)
    assert isinstance(pack, TaskDirPack) and pack.size == 2
    assert pack.find("b").id == "b"
    assert [t.id for t in pack] == ["a", "b"]
    with pytest.raises(UserError, match="no task with id"):
        pack.find("zzz")


def test_jsonl_pack(tmp_path: Path) -> None:
    p = tmp_path / "pack.jsonl"
    recs = [{"id": "q1", "domain": "math", "prompt": "1+1?", "answer": "2"},
            {"domain": "math", "prompt": "2+2?", "answer": "4"}]
    p.write_text(json.dumps(recs[0]) + "\n\n" + json.dumps(recs[1]) + "\n")
    pack = JsonlPack(p)
    assert pack.size == 2
    assert pack.get(0).id == "q1" and pack.get(0).answer == "2"
    assert pack.get(1).id == "pack-3"  # line number of the record
    assert pack.get(1).source == f"{p}:3"


@pytest.mark.parametrize(
    ("line", "needle"),
    [("{not json", "not valid JSON"), ("[1, 2]", "JSON object"),
     ('{"domain": "math", "prompt": "x", "colour": 1}', "colour"),
     ('{"prompt": "x"}', "domain")],
)
def test_jsonl_malformed(tmp_path: Path, line: str, needle: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"domain": "math", "prompt": "ok", "answer": "1"}\n' + line + "\n")
    pack = JsonlPack(p)
    pack.get(0)
    with pytest.raises(UserError) as exc:
        pack.get(1)
    assert f"{p}:2" in str(exc.value) and needle in str(exc.value)


def test_open_path_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        open_path(tmp_path / "missing")
    f = tmp_path / "notes.txt"
    f.write_text("hi")
    with pytest.raises(UserError, match="not a task pack"):
        open_path(f)


def test_a_task_names_its_image_relative_to_its_directory(tmp_path: Path) -> None:
    from rlvr.sandbox.base import environment_of

    d = tmp_path / "t1"
    (d / "environment").mkdir(parents=True)
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (d / "hidden").mkdir()
    (d / "hidden" / "test_x.py").write_text("def test_x():\n    assert True\n")
    (d / "task.toml").write_text('id = "t1"\ndomain = "code"\nimage = "dockerfile:environment"\n'
                                 'network = true\n')
    task = load_task_dir(d)
    assert task.image == "dockerfile:environment" and task.network
    assert environment_of(task) == {"image": f"dockerfile:{(d / 'environment').resolve()}", "network": True}
    registry_image = task.model_copy(update={"image": "debian:bookworm-slim", "network": False})
    assert environment_of(registry_image) == {"image": "debian:bookworm-slim"}
    assert environment_of(task.model_copy(update={"image": None, "network": False})) == {}


def test_an_image_of_the_wrong_type_is_one_line(tmp_path: Path) -> None:
    d = tmp_path / "t2"
    d.mkdir()
    (d / "task.toml").write_text('id = "t2"\ndomain = "code"\nimage = 3\n')
    with pytest.raises(UserError) as err:
        load_task_dir(d)
    assert err.value.field == "image" and "\n" not in str(err.value)
