"""The jail inside real images (marker `images`, `make test-images`): the hostile programs of the host-root
tests, the containment self-test, limits, recovery, whiteouts, images without Python or a shell, a Dockerfile
that fails, archives, network, and the image's ENV, WORKDIR and USER. The test images (tests/sandbox/images/)
build FROM the base image `make images` tags; they are cached in podman's store and rlvr's image cache after
the first run."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.sandbox import imagecache, podman
from rlvr.sandbox.imagecache import Cache, ImageRoot
from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.result import ExecLimits, ExecStatus
from rlvr.sandbox.selftest import run_checks
from tests.sandbox.conftest import TIGHT
from tests.sandbox.test_pool import HOSTILE, _argv

pytestmark = pytest.mark.images
HERE = Path(__file__).resolve().parent / "images"
BASE = "debian:bookworm-slim"
"""The base image `make images` builds with mmdebstrap (no Python)."""


def ref(name: str) -> str:
    """The reference of one of the test images."""
    return f"dockerfile:{HERE / name}"


@pytest.fixture(scope="module")
def ipool() -> Iterator[BwrapPool]:
    with BwrapPool(workers=2, spares=0, allow_network=True, image_pools=8) as p:
        yield p


def _root(pool: BwrapPool, image: str) -> ImageRoot:
    return pool.resolve_image(image)


# ------------------------------------------------------------------------------- the jail, as on the host


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_program_is_contained_and_classified_in_an_image(ipool: BwrapPool, name: str) -> None:
    code, expected = HOSTILE[name]
    image = ref("python")
    r = ipool.run(_argv(name, code), limits=TIGHT, image=image)
    assert r.status is expected, (r.status, r.exit_code, r.signal, r.stderr[-300:], r.error)
    assert ipool.run(["python", "-c", "print('next')"], image=image).stdout == "next\n"  # the worker survived


@pytest.mark.parametrize("image", [ref("python"), BASE])
def test_the_containment_self_test_passes_inside_an_image(image: str) -> None:
    with BwrapPool(workers=2, spares=0, probe=True) as pool:  # probe: programs in the image without Python
        results = run_checks(pool, image=image)
    assert [r.name for r in results if not r.passed] == [], [r.detail for r in results if not r.passed]


def test_the_self_test_command_takes_an_image() -> None:
    res = subprocess.run([sys.executable, "-m", "rlvr", "sandbox", "check", "--image", BASE],
                         capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "containment checks passed" in res.stdout and "FAIL" not in res.stdout


@pytest.mark.parametrize("image", [ref("python"), BASE])
def test_limits_hold_in_an_image_with_or_without_python(ipool: BwrapPool, image: str) -> None:
    lim = ExecLimits(timeout_s=1.5, memory_mb=96, processes=24, output_bytes=4096)
    timeout = ipool.run(["sh", "-c", "while :; do :; done"], limits=lim, image=image)
    # the memory hog has the time to reach the memory limit on a loaded machine (at load 20 it timed out)
    memory = ipool.run(["sh", "-c", "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}"],
                       limits=ExecLimits(timeout_s=60, memory_mb=96, processes=24, output_bytes=4096),
                       image=image)
    procs = ipool.run(["sh", "-c", "b() { b | b & }; b; sleep 5"], limits=lim, image=image)
    output = ipool.run(["sh", "-c", "yes"], limits=lim, image=image)
    assert (timeout.status, memory.status, procs.status, output.status) == (
        ExecStatus.timeout, ExecStatus.memory_limit, ExecStatus.process_limit, ExecStatus.output_limit)
    assert ipool.run(["echo", "next"], image=image).stdout == "next\n"


def test_the_image_root_is_read_only_and_the_host_invisible(ipool: BwrapPool, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    script = (f"for t in /usr/x /etc/x /x /opt/rlvr/x /root/x {secret}; do "
              "(echo x > $t) 2>/dev/null && echo WROTE $t; done; "
              f"cat {secret} /etc/shadow 2>&1; ls /work /.rlvr 2>&1; echo done")
    r = ipool.run(["sh", "-c", script], image=BASE)
    assert r.ok and "WROTE" not in r.stdout and "TOPSECRET" not in r.stdout and r.stdout.endswith("done\n")
    assert "root:" not in r.stdout and not (tmp_path / "x").exists()


def test_setuid_binaries_of_the_image_grant_nothing(ipool: BwrapPool) -> None:
    r = ipool.run(["suid-id"], image=ref("python"))
    assert r.ok and r.stdout.startswith("uid=65534(nobody) gid=65534(nogroup)") and "euid" not in r.stdout
    binary = _root(ipool, ref("python")).rootfs / "usr/local/bin/suid-id"
    assert binary.stat().st_mode & 0o4000  # it is setuid


def test_the_image_user_root_runs_as_the_sandbox_user(ipool: BwrapPool) -> None:
    r = ipool.run(["sh", "-c", "id -u; grep -E 'NoNewPrivs|CapEff' /proc/self/status; cat /root/.bashrc"],
                  image=BASE)
    lines = r.stdout.split()
    assert lines[:5] == ["65534", "CapEff:", "0000000000000000", "NoNewPrivs:", "1"], r.stdout
    assert "Permission denied" in r.stderr  # root's home in the image is root's, not the job's


# ------------------------------------------------------------------------------------ the image's contents


def test_a_file_deleted_in_a_later_layer_is_gone(ipool: BwrapPool) -> None:
    fs = _root(ipool, ref("whiteout")).rootfs
    assert not (fs / "gone.txt").exists() and not (fs / "d/a").exists() and (fs / "d/sub/b").is_file()
    assert (fs / "kept.txt").is_file() and sorted(os.listdir(fs / "opaque")) == ["new.txt"]
    r = ipool.run(["sh", "-c", "ls /gone.txt /d/a 2>&1; cat /kept.txt; ls /opaque"], image=ref("whiteout"))
    assert "No such file" in r.stdout and "keep\nnew.txt\n" in r.stdout


def test_an_image_without_python_execs_every_job(ipool: BwrapPool) -> None:
    root = _root(ipool, BASE)
    assert root.python is None and root.shell
    pool = ipool.environment_pool(BASE)
    assert pool.environment.supervisor == "host" and pool.warm == []
    r = ipool.run(["python", "-c", "print(1)"], image=BASE)
    assert r.status is ExecStatus.exit_nonzero and r.exit_code == 127  # the image has none: not the host's
    script = ("cat /etc/debian_version; ls -A /opt/rlvr/host/prefix /opt/rlvr/host/lib0; "
              "wc -c < /opt/rlvr/host/ld.so; ls -d /usr/lib/python3* 2>&1 || true")
    r = ipool.run(["sh", "-c", script], image=BASE)
    out = r.stdout.split()
    # the host's interpreter and libraries are hidden from jobs: empty mount points only
    assert r.ok and out[0].startswith("12.") and "0" in out and "No such file" in r.stdout, r.stdout


def test_an_image_with_python_forks_jobs_from_its_own_warm_interpreter(ipool: BwrapPool) -> None:
    image = ref("python")
    assert ipool.environment_pool(image).environment.supervisor == "image"
    code = "import os, sys\nprint(sys.executable, os.readlink('/proc/self/exe'), 'ctypes' in sys.modules)"
    r = ipool.run(["python", "-c", code], image=image)
    assert r.ok and r.stdout.split() == ["/usr/bin/python3", "/usr/bin/python3.11", "True"]  # ctypes: warm


def test_an_image_without_a_shell_refuses_shell_commands_in_one_line(ipool: BwrapPool) -> None:
    image = ref("noshell")
    assert not _root(ipool, image).shell
    r = ipool.run(["/busybox", "echo", "static"], image=image)
    assert r.ok and r.stdout == "static\n"
    with pytest.raises(UserError) as exc:
        ipool.run(["sh", "-c", "echo no"], image=image)
    line = str(exc.value)
    assert "no shell (/bin/sh)" in line and "\n" not in line and "noshell" in line


def test_the_images_env_workdir_and_user_are_honoured(ipool: BwrapPool) -> None:
    image = ref("user")
    with ipool.lease({"mine.txt": "x\n"}, image=image) as sb:
        script = ("id -u; id -g; pwd; echo $GREETING $APP_MODE; cat data/seed.txt mine.txt; "
                  "cat /home/app/own.txt; ls /workspace; echo new > data/made.txt")
        r = sb.run(["sh", "-c", script])
        assert r.ok, r.stderr
        assert r.stdout.split() == ["1234", "1234", "/srv/app", "hello", "test", "seeded", "x", "mine",
                                    "data", "mine.txt"]
        want = {"data/seed.txt": "seeded\n", "mine.txt": "x\n", "data/made.txt": "new\n"}
        assert sb.read_files(None) == want


def test_hosts_names_localhost_and_there_is_no_network_by_default(ipool: BwrapPool) -> None:
    # rlvr's hosts file (it names the jail's hostname too), whatever the image's holds
    script = ("hostname; getent hosts sandbox; getent hosts deb.debian.org || echo unresolved; "
              "tail -n +3 /proc/net/dev | cut -d: -f1")
    r = ipool.run(["sh", "-c", script], image=BASE)
    want = ["sandbox", "127.0.0.1", "localhost", "sandbox", "unresolved", "lo"]
    assert r.ok and r.stdout.split() == want, r.stdout


def _external_ipv4() -> str | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


def test_network_when_allowed_reaches_out_but_never_the_hosts_loopback(ipool: BwrapPool) -> None:
    addr = _external_ipv4()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address to listen on")
    outside, loop = socket.socket(), socket.socket()
    outside.bind((addr, 0))
    loop.bind(("127.0.0.1", 0))
    for s in (outside, loop):
        s.listen()
    code = ("import socket\nfor a in {targets!r}:\n    try:\n        socket.create_connection(a, timeout=2)\n"
            "        print('OPEN')\n    except OSError:\n        print('CLOSED')")
    targets = [(addr, outside.getsockname()[1]), ("127.0.0.1", loop.getsockname()[1]),
               ("10.0.2.2", loop.getsockname()[1])]
    program = ["python", "-c", code.format(targets=targets)]
    try:
        on = ipool.run(program, image=ref("python"), network=True)
        off = ipool.run(program, image=ref("python"))
        host_on = ipool.run(program, network=True)  # the host root with network too
    finally:
        outside.close()
        loop.close()
    assert on.stdout.split() == host_on.stdout.split() == ["OPEN", "CLOSED", "CLOSED"], on.stdout + on.stderr
    assert off.stdout.split() == ["CLOSED", "CLOSED", "CLOSED"], off.stdout + off.stderr


def test_idle_image_pools_beyond_the_limit_are_stopped_and_come_back() -> None:
    with BwrapPool(workers=1, spares=0, image_pools=1) as pool:
        first = pool.environment_pool(BASE)
        assert pool.run(["true"], image=BASE).ok
        assert pool.run(["/busybox", "true"], image=ref("noshell")).ok
        assert first._closed and pool.environment_pools() == [pool.environment_pool(ref("noshell"))]
        with pool.lease(image=ref("noshell")) as held:  # an image pool with an open lease is never stopped
            assert pool.run(["true"], image=BASE).ok
            assert held.run(["/busybox", "echo", "kept"]).stdout == "kept\n"
        assert pool.run(["true"], image=BASE).ok


# ------------------------------------------------------------------------------------ faults and recovery


def test_a_worker_killed_in_an_image_is_replaced(ipool: BwrapPool) -> None:
    pool = ipool.environment_pool(ref("python"))
    for pid in pool.worker_pids():  # idle workers: replaced without costing a job an attempt
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)  # as on the host root: the kill has landed before the next job looks
    r = ipool.run(["python", "-c", "print('after idle kill')"], image=ref("python"))
    assert r.ok and r.attempts == 1

    def kill_busy() -> None:
        deadline = time.monotonic() + 30
        while not pool._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.4)
        for w in list(pool._busy):
            os.kill(w.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_busy)
    killer.start()
    r = ipool.run(["sh", "-c", "sleep 1; echo finished"], image=ref("python"))
    killer.join()
    # an infra fault, retried: never the program's
    assert r.ok and r.attempts == 2 and r.stdout == "finished\n"


def test_a_program_that_kills_itself_is_its_own_fault_not_the_sandboxs(ipool: BwrapPool) -> None:
    r = ipool.run(["sh", "-c", "kill -9 $$"], image=BASE)
    assert r.status is ExecStatus.exit_nonzero and r.signal == 9 and r.attempts == 1


# --------------------------------------------------------------------------------------- builds and cache


def test_a_failing_dockerfile_is_one_line_with_its_step_and_nothing_is_cached(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "rlvr", "images", "build", ref("broken"), "--cache",
                          str(tmp_path / "cache")], capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 2 and res.stdout == "", res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and str(HERE / "broken" / "Dockerfile") in line and "step 3/4" in line
    assert "exit 3" in line or "exit status 3" in line
    for sub in ("roots", "refs", "tmp"):
        assert os.listdir(tmp_path / "cache" / sub) == []


def test_a_reference_that_cannot_be_pulled_is_one_line_with_the_fix(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "rlvr", "images", "build", "registry.invalid/team/env:1",
                          "--cache", str(tmp_path)], capture_output=True, text=True, timeout=240, check=False)
    line = res.stderr.strip()
    assert res.returncode == 2 and "\n" not in line and "registry.invalid/team/env:1" in line
    assert "dockerfile:DIR" in line and "docker-archive:" in line


def test_archives_and_layouts_load_to_the_same_image(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    built = imagecache.resolve(ref("noshell"), cache)
    for fmt, name in (("docker-archive", "img.tar"), ("oci-archive", "oci.tar"), ("oci-dir", "layout")):
        podman.run(["save", "--format", fmt, "-o", str(tmp_path / name), built.id])
    before = podman.tags()
    for transport, name in (("docker-archive", "img.tar"), ("oci-archive", "oci.tar"), ("oci", "layout")):
        assert imagecache.resolve(f"{transport}:{tmp_path / name}", cache).id == built.id, transport
    assert len(cache.entries()) == 1 and len(cache.index()) == 4
    assert podman.tags() == before  # loading them left no path-named image in podman's store


def test_a_cached_image_is_found_without_podman(ipool: BwrapPool, monkeypatch: pytest.MonkeyPatch) -> None:
    image = ref("python")
    first = _root(ipool, image)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("podman was asked")

    monkeypatch.setattr(podman, "run", refuse)
    monkeypatch.setattr(podman, "build", refuse)
    t0 = time.perf_counter()
    again = imagecache.resolve(image, Cache(imagecache.cache_dir()))
    assert again.id == first.id and time.perf_counter() - t0 < 0.5


# ------------------------------------------------------------------------------ a task's path, end to end


def _image_task(image: str) -> object:
    """A Task that names an image, as the task loader will make one (the field is not on Task yet)."""
    from pydantic import ConfigDict

    from rlvr.tasks.spec import Task, TaskLimits

    class ImageTask(Task):
        model_config = ConfigDict(frozen=True, extra="forbid")
        image: str | None = None
        network: bool = False

    return ImageTask(id="img", domain="repo-real", prompt="p", workspace={"notes.txt": "hi\n"}, image=image,
                     limits=TaskLimits(max_turns=4))


def test_an_episodes_tools_run_in_its_tasks_image(ipool: BwrapPool) -> None:
    from rlvr.envs.env import Env
    from rlvr.envs.messages import Message, ToolCall

    env = Env(ipool)
    try:
        env.reset(_image_task(ref("python")))  # type: ignore[arg-type]
        command = "cat notes.txt; echo $RLVR_IMAGE_GREETING"
        call = ToolCall(id="1", name="bash", arguments={"command": command})
        out = env.step(Message(role="assistant", content="", tool_calls=[call]))
        assert "hi\nhello-from-the-image" in out.messages[0].content, out.messages[0].content
    finally:
        env.close()


def test_a_store_reference_is_found_without_podman_until_the_store_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path)
    first = imagecache.resolve(BASE, cache)
    real, asked = podman.run, []
    monkeypatch.setattr(podman, "run", lambda args, **kw: asked.append(args[0]) or real(args, **kw))
    assert imagecache.resolve(BASE, cache).id == first.id and asked == []
    tag = f"localhost/rlvr-test/retag-{os.getpid()}:1"
    real(["tag", BASE, tag])  # any change to the store: the reference is looked up again
    try:
        assert imagecache.resolve(BASE, cache).id == first.id and "image" in asked
    finally:
        real(["untag", first.id, tag], check=False)
