"""rlvr.scale.cluster: one way to connect (refusals in one line, workers' output on stderr only), placement
checks and the actors' lifecycle, against fakes and against the real two-node local Ray of conftest.py."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.scale import cluster

ROOT = Path(__file__).resolve().parents[2]


def _fake_ray(monkeypatch: pytest.MonkeyPatch, init_error: Exception | None = None,
              resources: dict[str, float] | None = None) -> list[dict]:
    """A stand-in `ray` module: records ray.init's arguments, raises `init_error` from it."""
    calls: list[dict] = []
    fake = types.ModuleType("ray")

    def init(**kw):
        calls.append(kw)
        if init_error is not None:
            raise init_error

    fake.init = init
    fake.is_initialized = lambda: False
    fake.cluster_resources = lambda: dict(resources or {})
    monkeypatch.setitem(sys.modules, "ray", fake)
    return calls


def test_without_ray_a_cluster_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(UserError, match=r"policy.engines needs Ray.*rlvr\[ray\]") as info:
        cluster.import_ray("policy.engines", field="policy.engines")
    assert info.value.field == "policy.engines"
    with pytest.raises(UserError, match=r"\[cluster.address\]"):
        cluster.connect("auto")


def test_an_unreachable_cluster_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_ray(monkeypatch, ConnectionError("Could not find any running Ray instance.\nPlease start one."))
    with pytest.raises(UserError) as info:
        cluster.connect(None)
    msg = str(info.value)
    assert ("cannot connect to the Ray cluster at 'auto'" in msg and "ray start --head" in msg
            and "\n" not in msg)


def test_workers_output_is_not_forwarded_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_ray(monkeypatch)
    cluster.connect("ray://head:10001")
    assert calls == [{"address": "ray://head:10001", "ignore_reinit_error": True, "log_to_driver": False}]


def test_what_the_cluster_cannot_hold_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_ray(monkeypatch, resources={"CPU": 2.0})
    cluster.require("CPU", 2, what="2 ranks", field="train.world_size", fix="add nodes")
    with pytest.raises(UserError, match=r"4096 engines need 4096 GPUs; the Ray cluster has 0") as info:
        cluster.require("GPU", 4096, what="4096 engines", field="policy.engines", fix="add nodes")
    assert info.value.field == "policy.engines"


SPEAKER = textwrap.dedent("""
    import sys, time

    class Tee:  # stderr, remembering what went through it
        def __init__(self, inner):
            self.inner, self.seen = inner, ""
        def write(self, text):
            self.seen += text
            return self.inner.write(text)
        def flush(self):
            self.inner.flush()
        def __getattr__(self, name):  # fileno, isatty, encoding, ...
            return getattr(self.inner, name)

    sys.stderr = tee = Tee(sys.stderr)
    from rlvr.scale import cluster

    ray = cluster.connect(sys.argv[1], forward_logs=True)

    @ray.remote(num_cpus=0)
    def speak():
        print("MARK-STDOUT")
        print("MARK-STDERR", file=sys.stderr)
        sys.stdout.flush(); sys.stderr.flush()

    ray.get(speak.remote())
    deadline = time.monotonic() + 60  # the log monitor forwards what it finds about once a second
    while not ("MARK-STDOUT" in tee.seen and "MARK-STDERR" in tee.seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    sys.stdout.write("RESULT\\n")
""")


@pytest.mark.timeout(180)
def test_forwarded_worker_output_goes_to_stderr_never_stdout(ray_cluster) -> None:
    """A driver that asks for its workers' output gets it on stderr; its stdout holds only what it printed
    itself (what `--json` output needs)."""
    done = subprocess.run([sys.executable, "-c", SPEAKER, ray_cluster.address], capture_output=True,
                          text=True,
                          timeout=150, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "RESULT\n", done.stdout[-2000:]
    assert "MARK-STDOUT" in done.stderr and "MARK-STDERR" in done.stderr, done.stderr[-3000:]


@pytest.mark.timeout(120)
def test_actors_start_in_place_and_stop_for_good(ray_cluster) -> None:
    import ray

    class Echo:
        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

        def close(self) -> None:
            return None

    nodes = cluster.alive_nodes()
    assert len(nodes) == 2
    actors = [cluster.start(Echo, strategy=cluster.on_node(n), num_cpus=0) for n in nodes]
    assert ray.get([a.node.remote() for a in actors]) == nodes  # each on the node it was pinned to
    with cluster.bundles([{"CPU": 1}]) as group:
        placed = cluster.start(Echo, strategy=cluster.in_bundle(group, 0), num_cpus=1)
        assert ray.get(placed.node.remote()) in nodes
        cluster.stop([placed])
    cluster.kill(actors[0])
    cluster.stop(actors, "close", timeout_s=30)  # one already dead: the other is still stopped
    for a in actors:
        with pytest.raises(cluster.actor_faults()):
            ray.get(a.node.remote(), timeout=30)
