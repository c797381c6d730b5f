"""Image references, the image root's safe preparation, the cache's atomicity and locks, the jail's layout
over an image, and the lease API's environment arguments: everything about images that needs no podman."""
from __future__ import annotations

import ast
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.errors import UserError
from rlvr.sandbox import imagecache, podman, rootfs
from rlvr.sandbox.base import environment_of, in_environment
from rlvr.sandbox.fake import FakePool
from rlvr.sandbox.image_container import HOST_DIR, ImageContainer, host_runtime
from rlvr.sandbox.imagecache import Cache, ImageRoot
from rlvr.sandbox.images import ImageRef, normalise, parse
from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.unsafe import UnsafePool

# ----------------------------------------------------------------------------------------------- references
DIGESTED = f"localhost:5000/team/env@sha256:{'a' * 64}"


@pytest.mark.parametrize(("ref", "want"), [
    ("debian:bookworm-slim", ImageRef("docker", "debian:bookworm-slim")),
    ("docker://ghcr.io/org/img:1.2", ImageRef("docker", "ghcr.io/org/img:1.2")),
    (DIGESTED, ImageRef("docker", DIGESTED)),
    ("dockerfile:envs/t1", ImageRef("dockerfile", "envs/t1")),
    ("dockerfile:envs/t1#docker/Dockerfile.t", ImageRef("dockerfile", "envs/t1", "docker/Dockerfile.t")),
    ("docker-archive:/srv/img.tar", ImageRef("docker-archive", "/srv/img.tar")),
    ("oci:layout", ImageRef("oci", "layout")),
    ("oci-archive:x.tar", ImageRef("oci-archive", "x.tar")),
    ("containers-storage:localhost/mine", ImageRef("containers-storage", "localhost/mine")),
])
def test_references_parse_in_the_style_of_containers_transports(ref: str, want: ImageRef) -> None:
    assert parse(ref) == want
    assert parse(str(want)) == want  # printing a reference gives it back


@pytest.mark.parametrize("bad", ["", "  ", "Debian:Latest", "dockerfile:", "oci:", "two words",
                                 "dockerfile:ctx#../outside", "dockerfile:ctx#/etc/Dockerfile"])
def test_a_malformed_reference_is_one_line_naming_the_field_and_the_forms(bad: str) -> None:
    with pytest.raises(UserError) as exc:
        parse(bad)
    assert exc.value.field == "image" and "\n" not in str(exc.value) and "dockerfile:" in str(exc.value)


def test_relative_paths_resolve_against_a_base_and_registry_names_normalise(tmp_path: Path) -> None:
    assert parse("dockerfile:env").absolute(tmp_path) == ImageRef("dockerfile", str(tmp_path / "env"))
    assert parse("debian:bookworm-slim").absolute(tmp_path).target == "debian:bookworm-slim"
    assert normalise("debian:bookworm-slim") == "docker.io/library/debian:bookworm-slim"
    assert normalise("ubuntu") == "docker.io/library/ubuntu:latest"
    assert normalise("org/img") == "docker.io/org/img:latest"
    assert normalise("ghcr.io/org/img") == "ghcr.io/org/img:latest"
    assert normalise("localhost:5000/x@sha256:" + "0" * 64).endswith("@sha256:" + "0" * 64)


# -------------------------------------------------------------------------------------------------- rootfs


def _tree(root: Path, spec: dict[str, str | None]) -> Path:
    """Files (text), directories (a trailing /) and links ("-> target") under root."""
    for rel, content in spec.items():
        p = root / rel.rstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            p.mkdir(exist_ok=True)
        elif content is not None and content.startswith("-> "):
            p.symlink_to(content[3:])
        else:
            p.write_text(content or "")
    return root


def test_paths_resolve_inside_the_image_never_on_the_host(tmp_path: Path) -> None:
    fs = _tree(tmp_path / "fs", {"usr/bin/": None, "bin": "-> usr/bin", "usr/bin/python3": "-> python3.11",
                                 "usr/bin/python3.11": "x", "escape": "-> /etc", "up": "-> ../../..",
                                 "loop": "-> loop2", "loop2": "-> loop"})
    assert rootfs.resolve_in(fs, "/bin/python3") == "/usr/bin/python3.11"
    # the image's /etc, which it lacks: not the host's
    assert rootfs.resolve_in(fs, "/escape/passwd") is None
    assert rootfs.resolve_in(fs, "/up/usr/bin") == "/usr/bin"  # .. stops at the image's root
    assert rootfs.resolve_in(fs, "/loop") is None


def test_mount_points_are_made_without_following_a_planted_link(tmp_path: Path) -> None:
    outside = tmp_path / "host-file"
    outside.write_text("host")
    fs = _tree(tmp_path / "fs", {"etc/hosts": f"-> {outside}", "opt": f"-> {tmp_path}"})
    rootfs.ensure_file(fs, "/etc/hosts")
    hosts = fs / "etc/hosts"
    assert outside.read_text() == "host" and hosts.is_file() and not hosts.is_symlink()
    rootfs.ensure_file(fs, "/etc/resolv.conf")  # created when missing
    assert (fs / "etc/resolv.conf").read_text() == ""
    with pytest.raises(rootfs.RootfsError):
        rootfs.ensure_dir(fs, "/opt/rlvr")  # /opt is a link to a host directory: refused, nothing made there
    assert not (tmp_path / "rlvr").exists()


def test_the_image_user_root_becomes_the_sandbox_user_and_others_keep_their_uid(tmp_path: Path) -> None:
    passwd = "root:x:0:0::/root:/bin/sh\napp:x:1234:1300::/home/app:/bin/sh\ntoor:x:0:0::/:/bin/sh\n"
    fs = _tree(tmp_path / "fs", {"etc/passwd": passwd, "etc/group": "root:x:0:\nstaff:x:50:\n"})
    assert rootfs.lookup_user(fs, None) == (65534, 65534, "sandbox")
    assert rootfs.lookup_user(fs, "root") == (65534, 65534, "sandbox")
    assert rootfs.lookup_user(fs, "toor")[0] == 65534  # another name for uid 0 is still root
    assert rootfs.lookup_user(fs, "0:0")[0] == 65534
    assert rootfs.lookup_user(fs, "app") == (1234, 1300, "app")
    assert rootfs.lookup_user(fs, "app:staff") == (1234, 50, "app")
    assert rootfs.lookup_user(fs, "4321") == (4321, 4321, "u4321")
    assert rootfs.lookup_user(fs, "1234:0") == (1234, 65534, "app")  # never root's group either
    with pytest.raises(rootfs.RootfsError):
        rootfs.lookup_user(fs, "nobody-here")


@pytest.mark.parametrize(("workdir", "want"), [
    (None, "/workspace"), ("/", "/workspace"), ("/usr", "/workspace"), ("/tmp/x", "/workspace"),
    ("/proc/1", "/workspace"), ("/opt/rlvr/x", "/workspace"), ("/app", "/app"), ("/srv/app/", "/srv/app"),
    ("/testbed", "/testbed")])
def test_the_workspace_goes_to_a_safe_workdir_only(workdir: str | None, want: str) -> None:
    assert rootfs.workdir_of(workdir) == want


def _python_tree(root: Path, version: str, modules: tuple[str, ...] = rootfs.ZYGOTE_MODULES) -> Path:
    spec: dict[str, str | None] = {f"usr/bin/python{version}": "#!", "usr/bin/python3": f"-> python{version}"}
    spec |= {f"usr/lib/python{version}/{m}": "" for m in modules}
    fs = _tree(root, spec)
    (fs / f"usr/bin/python{version}").chmod(0o755)
    return fs


def test_a_python_is_one_the_zygote_can_run_on(tmp_path: Path) -> None:
    assert rootfs.find_python(_python_tree(tmp_path / "a", "3.11"), None) == ("/usr/bin/python3", "3.11")
    assert rootfs.find_python(_python_tree(tmp_path / "b", "3.8"), None) is None  # too old
    no_ctypes = tuple(m for m in rootfs.ZYGOTE_MODULES if not m.startswith("ctypes"))
    assert rootfs.find_python(_python_tree(tmp_path / "c", "3.11", no_ctypes), None) is None  # -minimal
    found = rootfs.find_python(_python_tree(tmp_path / "d", "3.12"), "/nowhere:/usr/bin")
    assert found == ("/usr/bin/python3", "3.12")
    assert rootfs.find_python(tmp_path / "empty", None) is None


def test_the_zygote_and_wire_parse_as_python_3_9() -> None:
    src = Path(rootfs.__file__).parent
    for name in ("zygote.py", "wire.py"):
        ast.parse((src / name).read_text(), feature_version=rootfs.MIN_PYTHON)


def test_synthesised_etc_keeps_the_images_users_and_adds_the_jobs(tmp_path: Path) -> None:
    fs = _tree(tmp_path / "fs", {"etc/passwd": "root:x:0:0::/root:/bin/sh\n", "etc/group": "root:x:0:\n"})
    rootfs.synth_etc(fs, tmp_path / "etc", 65534, 65534, "sandbox")
    passwd = (tmp_path / "etc/passwd").read_text().splitlines()
    assert passwd[0].startswith("root:") and passwd[1].startswith("sandbox:x:65534:65534:")
    assert (tmp_path / "etc/group").read_text().splitlines()[1] == "sandbox:x:65534:"
    assert "localhost" in (tmp_path / "etc/hosts").read_text()
    rootfs.synth_etc(tmp_path / "scratch", tmp_path / "etc2", 65534, 65534, "sandbox")  # no /etc at all
    assert (tmp_path / "etc2/passwd").read_text().startswith("root:")


# ---------------------------------------------------------------------------------------------------- cache


@pytest.fixture
def fake_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """podman replaced: the "store" holds one image whose merged root is a directory of this test."""
    merged = _tree(tmp_path / "merged", {"bin/sh": "#!", "etc/passwd": "root:x:0:0::/root:/bin/sh\n",
                                         "usr/": None})
    (merged / "bin/sh").chmod(0o755)
    state = {"merged": merged, "user": None, "builds": 0}

    def inspect(name: str) -> podman.Inspected:
        return podman.Inspected("f" * 64, {"User": state["user"]} if state["user"] else {}, ("t:1",), 10)

    def build(context: Path, dockerfile: Path, tag: str) -> str:
        state["builds"] += 1
        time.sleep(0.2)  # long enough for concurrent resolvers to pile up on the lock
        return "f" * 64

    monkeypatch.setattr(podman, "inspect", inspect)
    monkeypatch.setattr(podman, "build", build)
    monkeypatch.setattr(podman, "mount", lambda image_id: str(state["merged"]))
    monkeypatch.setattr(podman, "unmount", lambda image_id: None)
    return state


def _context(tmp_path: Path) -> str:
    ctx = _tree(tmp_path / "ctx", {"Dockerfile": "FROM scratch\n", "data.txt": "1"})
    return f"dockerfile:{ctx}"


def test_an_image_is_unpacked_once_and_found_by_its_fingerprint(tmp_path: Path, fake_podman: dict) -> None:
    cache = Cache(tmp_path / "cache")
    ref = _context(tmp_path)
    roots = []
    threads = [threading.Thread(target=lambda: roots.append(imagecache.resolve(ref, cache)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake_podman["builds"] == 1 and {r.id for r in roots} == {"f" * 64}
    root = roots[0]
    assert (root.rootfs / "bin/sh").is_file() and (root.rootfs / "opt/rlvr").is_dir() and root.shell
    assert (root.rootfs / "etc/hosts").is_file() and "localhost" in (root.etc / "hosts").read_text()
    assert ImageRoot.load(root.path) == root and root.refs == (str(parse(ref)),)
    assert os.listdir(tmp_path / "cache/tmp") == []
    (tmp_path / "ctx/data.txt").write_text("changed")  # the context changed: built again
    imagecache.resolve(ref, cache)
    assert fake_podman["builds"] == 2


def test_a_failed_unpack_leaves_nothing_in_the_cache(tmp_path: Path, fake_podman: dict) -> None:
    cache = Cache(tmp_path / "cache")
    fake_podman["user"] = "nobody-in-passwd"  # fails after the copy, while the root is described
    with pytest.raises(podman.ImageError) as exc:
        imagecache.resolve(_context(tmp_path), cache)
    assert "nobody-in-passwd" in str(exc.value) and exc.value.field == "image"
    fake_podman["user"], fake_podman["merged"] = None, tmp_path / "no-such-dir"  # the copy itself fails
    with pytest.raises(podman.ImageError):
        imagecache.resolve(_context(tmp_path), cache)
    for sub in ("roots", "tmp", "refs"):
        assert os.listdir(cache.root / sub) == [], sub


def test_a_half_unpacked_root_of_a_dead_process_is_swept(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    (cache.root / "tmp" / "abc.999999999.dead").mkdir()
    (cache.root / "tmp" / f"abc.{os.getpid()}.live").mkdir()
    imagecache.sweep_tmp(cache)
    assert os.listdir(cache.root / "tmp") == [f"abc.{os.getpid()}.live"]


def test_prune_removes_what_no_reference_names_and_never_an_image_in_use(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    for image_id in ("a" * 64, "b" * 64, "c" * 64):
        (cache.entry(image_id) / "rootfs").mkdir(parents=True)
        ImageRoot(id=image_id, path=cache.entry(image_id)).dump()
    cache.remember("dockerfile:/x", "a" * 64, "fp")
    held = cache.use("c" * 64)
    try:
        assert [r.id for r in imagecache.prune(cache)] == ["b" * 64]
        assert [r.id for r in imagecache.prune(cache, everything=True)] == ["a" * 64]  # c is in use
        assert cache.recall("dockerfile:/x") is None  # its image is gone: so is the reference
    finally:
        os.close(held)
    assert [r.id for r in imagecache.prune(cache, everything=True)] == ["c" * 64]


def test_a_failed_build_names_its_step() -> None:
    out = ("STEP 1/3: FROM debian:bookworm-slim\nSTEP 2/3: RUN echo ok\nok\n--> 1234\n"
           "STEP 3/3: RUN   false\n"
           "Error: building at STEP \"RUN false\": while running runtime: exit status 1\n")
    assert podman.failed_step(out) == ("step 3/3 (RUN false)", "while running runtime: exit status 1")
    assert podman.failed_step("STEP 1/1: FROM x\nError: creating build container: no such image\n") == (
        "step 1/1 (FROM x)", "creating build container: no such image")


# --------------------------------------------------------------------------------------- the jail's layout


def _root(tmp_path: Path, **kw: object) -> ImageRoot:
    fs = _tree(tmp_path / "img/rootfs", {"usr/lib/": None, "lib": "-> usr/lib", ".dockerenv": "",
                                         "proc/": None, "tmp/": None, "etc/hosts": ""})
    rootfs.synth_etc(fs, tmp_path / "img/etc", 65534, 65534, "sandbox")
    return ImageRoot(id="e" * 64, path=fs.parent, **kw)  # type: ignore[arg-type]


def _argv(root: ImageRoot, tmp_path: Path, **kw: object) -> list[str]:
    c = ImageContainer("bwrap", "/py", "/py", None, tmp_path, root.etc, {}, 64, 256, (), image=root, **kw)
    cg = SimpleNamespace(binds=list, procs_files=list, zygote_procs_files=list)
    return c.argv(cg, -1)  # type: ignore[arg-type]


def test_the_image_root_is_bound_entry_by_entry_and_its_links_recreated(tmp_path: Path) -> None:
    root = _root(tmp_path)
    a = _argv(root, tmp_path, supervisor="host")
    pairs = {a[i + 2]: (a[i], a[i + 1]) for i in range(len(a) - 2) if a[i] in ("--ro-bind", "--symlink")}
    assert pairs["/lib"] == ("--symlink", "usr/lib")  # never a bind: the host would resolve the link
    assert pairs["/usr"] == ("--ro-bind", str(root.rootfs / "usr"))
    assert pairs["/.dockerenv"][0] == "--ro-bind" and "/proc" not in pairs and "/tmp" not in pairs
    assert pairs["/etc/hosts"] == ("--ro-bind", str(root.etc / "hosts"))
    assert pairs["/etc/resolv.conf"] == ("--ro-bind", str(root.etc / "resolv.conf"))


def test_the_hosts_interpreter_supervises_through_its_own_loader_hidden_from_jobs(tmp_path: Path) -> None:
    import json

    a = _argv(_root(tmp_path), tmp_path, supervisor="host")
    start = a.index("--inhibit-cache") - 1
    assert a[start] == f"{HOST_DIR}/ld.so" and a[start:].count("-E") == 1 and "-S" in a[start:]
    config = json.loads(a[-1])
    assert config["python"] is None and config["fast"] is False
    assert sorted(config["hide"]) == sorted(dst for _, dst in host_runtime().binds)
    for src, _ in host_runtime().binds:
        assert os.path.exists(src)
    probe = json.loads(_argv(_root(tmp_path / "p"), tmp_path, supervisor="host", probe=True)[-1])
    assert probe["fast"] is True and probe["hide"] == []


def test_an_image_python_supervises_itself_and_serves_python_jobs(tmp_path: Path) -> None:
    import json

    root = _root(tmp_path, python="/usr/bin/python3", python_version="3.11", uid=1234, gid=1234,
                 workdir="/app")
    a = _argv(root, tmp_path, supervisor="image")
    assert a[-3:-1] == ["/usr/bin/python3", "/opt/rlvr/zygote.py"]
    config = json.loads(a[-1])
    got = (config["python"], config["fast"], config["uid"], config["workdir"])
    assert got == ("/usr/bin/python3", True, 1234, "/app")


# ------------------------------------------------------------------------------------ the lease's arguments


def test_network_is_refused_unless_the_pool_allows_it(pool: BwrapPool) -> None:
    with pytest.raises(UserError) as exc:
        pool.run(["true"], network=True)
    assert exc.value.field == "sandbox.allow_network" and "allow_network = true" in str(exc.value)
    with pytest.raises(UserError):
        UnsafePool(warn=False).run(["true"], network=True)
    with UnsafePool(warn=False, allow_network=True).lease(network=True) as sb:
        assert sb.run(["true"]).ok


def test_the_unisolated_pool_refuses_an_image() -> None:
    with pytest.raises(UserError) as exc:
        UnsafePool(warn=False).run(["true"], image="debian:bookworm-slim")
    assert exc.value.field == "sandbox.isolation"


def test_a_tasks_environment_reaches_its_leases_only_when_it_has_one() -> None:
    fake = FakePool(lambda call: f"{call.image} {call.network}")
    assert environment_of(SimpleNamespace()) == {} and in_environment(fake) is fake
    task = SimpleNamespace(image="dockerfile:/t/env", network=True)
    assert environment_of(task) == {"image": "dockerfile:/t/env", "network": True}
    view = in_environment(fake, **environment_of(task))
    assert view.run(["x"]).stdout == "dockerfile:/t/env True"
    with view.lease({"a": "1"}, mounts={"/h": {"f": "x"}}) as sb:
        assert sb.run(["x"]).stdout == "dockerfile:/t/env True" and sb.mounts == {"/h": {"f": b"x"}}
    # what a caller names itself wins (a verifier's own image, its phase's network)
    assert view.run(["x"], image="debian:bookworm-slim", network=False).stdout == "debian:bookworm-slim False"
    with view.lease(image="oci:/v") as sb:
        assert sb.run(["x"]).stdout == "oci:/v True"


def test_an_image_is_refused_to_a_requirements_pool(pool: BwrapPool) -> None:
    derived = BwrapPool.__new__(BwrapPool)
    derived.derived, derived.allow_network = True, False
    with pytest.raises(UserError) as exc:
        derived.environment_pool("debian:bookworm-slim")
    assert exc.value.field == "requirements"


def test_the_images_command_lists_and_prunes_the_cache(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    cache = Cache(tmp_path)
    for image_id in ("a" * 64, "b" * 64):
        (cache.entry(image_id) / "rootfs").mkdir(parents=True)
        ImageRoot(id=image_id, path=cache.entry(image_id), refs=(f"dockerfile:/{image_id[0]}",),
                  size=2**20).dump()
    cache.remember("dockerfile:/a", "a" * 64, "fp")

    def rlvr(*args: str) -> object:
        res = subprocess.run([sys.executable, "-m", "rlvr", "images", *args, "--cache", str(tmp_path),
                              "--json"],
                             capture_output=True, text=True, timeout=60, check=True)
        return json.loads(res.stdout)

    assert [r["id"][0] for r in rlvr("list")] == ["a", "b"]  # type: ignore[union-attr]
    assert [r["id"][0] for r in rlvr("prune")] == ["b"]  # type: ignore[union-attr]
    assert [r["id"][0] for r in rlvr("list")] == ["a"]  # type: ignore[union-attr]
