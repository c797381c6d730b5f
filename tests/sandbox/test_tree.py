"""Workspace trees: a packed tree reads back exactly, an archive that unpacks too far is refused, and a tree
task's lease shows the tree (modes, links, empty directories) and packs it again at the end."""
from __future__ import annotations

import base64
import gzip
import io
import tarfile

import pytest

from rlvr.envs.env import Env
from rlvr.sandbox import tree
from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.tree import TREE, Member
from rlvr.tasks.spec import Task, TaskLimits

MEMBERS = [Member("bin", kind="dir", mode=0o755), Member("bin/run.sh", b"#!/bin/sh\necho ran\n", 0o750),
           Member("secret", b"k\n", 0o600), Member("empty", kind="dir", mode=0o700),
           Member("current", kind="link", target="bin/run.sh"), Member("blob", bytes(range(256)), 0o644)]


def test_pack_is_deterministic_and_reads_back() -> None:
    text = tree.pack(MEMBERS)
    assert text == tree.pack(reversed(MEMBERS))
    got = tree.members(text)
    assert set(got) == {m.path for m in MEMBERS}
    assert got["secret"].mode == 0o600 and got["bin/run.sh"].data.startswith(b"#!")
    assert got["current"].kind == "link" and got["current"].target == "bin/run.sh"
    assert got["blob"].data == bytes(range(256)) and got["empty"].kind == "dir"
    assert tree.readable({TREE: text}) == {"bin/run.sh": "#!/bin/sh\necho ran\n", "secret": "k\n"}


def test_an_archive_that_is_not_one_or_unpacks_too_far_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="base64"):
        tree.members("not base64!")
    with pytest.raises(ValueError, match="does not unpack"):
        tree.members(base64.b64encode(b"plain bytes").decode())
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 1 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    monkeypatch.setattr(tree, "MAX_UNPACKED", 1 << 16)
    with pytest.raises(ValueError, match="limits"):
        tree.members(base64.b64encode(buf.getvalue()).decode())


@pytest.fixture(scope="module")
def pool():
    with BwrapPool(workers=1, spares=0) as p:
        yield p


def _task() -> Task:
    return Task(id="t", domain="shell", prompt="arrange", workspace={TREE: tree.pack(MEMBERS)},
                limits=TaskLimits(max_turns=4))


def test_a_tree_task_shows_its_tree_and_packs_the_final_one(pool: BwrapPool) -> None:
    env = Env(pool)
    env.reset(_task())
    seen = env.sandbox.run(["sh", "-c", "stat -c '%n %a %F' bin/run.sh secret empty current; ls -A; "
                                         "./current; chmod 640 secret; ln -s secret key; mkdir -m 711 new"])
    assert seen.stdout.splitlines()[:4] == ["bin/run.sh 750 regular file", "secret 600 regular file",
                                            "empty 700 directory", "current 777 symbolic link"]
    assert ".rlvr" not in seen.stdout and "ran" in seen.stdout
    final = env.final_state()
    env.close()
    got = tree.members(final.files[TREE])
    assert got["secret"].mode == 0o640 and got["key"].target == "secret" and got["new"].mode == 0o711
    assert got["blob"].data == bytes(range(256))  # binary content survives the round trip
    assert final.files["secret"] == "k\n" and "blob" not in final.files  # the readable copy is text only


def test_the_archive_path_is_the_packers_whatever_a_program_wrote_there(pool: BwrapPool) -> None:
    env = Env(pool)
    env.reset(_task())
    env.sandbox.run(["sh", "-c", f"mkdir -p .rlvr && echo forged > {TREE} && echo x > .rlvr/other"])
    final = env.final_state()
    env.close()
    got = tree.members(final.files[TREE])
    assert not any(p.startswith(".rlvr") for p in got) and "secret" in got
