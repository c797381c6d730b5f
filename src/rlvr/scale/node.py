"""A Ray worker node that drains when told it will be taken away: what `rlvr node start` runs on each node of
a cluster of preemptible machines (a Kubernetes pod's entry point, a spot VM's service).

It starts `ray start --block` as its child and waits. A SIGTERM (the preemption notice a cloud or Kubernetes
gives, `terminationGracePeriodSeconds` before the kill) or SIGINT starts the drain:
1. Ray is asked to drain the node with a deadline `grace_s` away (`rlvr.scale.cluster.drain`: Ray's own drain,
   the one its autoscaler uses for preemption); nothing new is placed there from then on;
2. every rlvr fleet on the cluster sees the drain at its next look: jobs there finish, open workspaces are
   handed back before the deadline (their episodes go on elsewhere), then it marks the node drained;
3. the agent stops its Ray node as soon as the node is marked drained or Ray reports it idle (nothing holds
   resources there: an engine or a worker of another fleet would), or at the deadline, whichever is first, and
   exits 0. A second signal stops the node at once.

The node is found by a label of its own (`rlvr-node=<id>`), read through the GCS, so the agent itself is not a
Ray driver and holds nothing on the cluster. Before joining, the agent can warm task images (`--warm-image
REF`): each is built or pulled and unpacked into the machine's image cache, which every pool actor there then
shares.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from rlvr.errors import UserError
from rlvr.scale import cluster

LABEL = "rlvr-node"
"""The node label that names the agent's node."""
FIND_TIMEOUT_S = 120.0
"""Limit of the node's registration with the head."""


def _ray_command() -> str:
    beside = Path(sys.executable).with_name("ray")  # the `ray` of this interpreter's environment
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        raise UserError("`ray` is not installed here", field="rlvr node start", fix="pip install 'rlvr[ray]'")
    return found


def find_node(address: str, label: str, timeout_s: float = FIND_TIMEOUT_S, alive: Any = None) -> str:
    """The Ray id of the alive node labelled `rlvr-node=<label>` (waits for it to register; `alive()` False:
    the node's process is gone, stop waiting)."""
    from ray._raylet import GcsClient

    deadline = time.monotonic() + timeout_s
    gcs = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise UserError(f"`ray start` exited before the node joined the Ray head at {address}",
                            field="--address", fix=cluster.UNREACHABLE_FIX)
        try:
            gcs = gcs or GcsClient(address=address)
            nodes = gcs.get_all_node_info(timeout=5)
        except Exception:  # noqa: BLE001 (the head not reachable yet: `ray start` says why, or times out)
            gcs = None
            time.sleep(1.0)
            continue
        for node_id, info in nodes.items():
            if dict(info.labels).get(LABEL) == label and info.state == 0:  # 0: ALIVE
                return node_id.hex()
        time.sleep(0.5)
    raise UserError(f"the Ray node did not register with the head at {address} within {timeout_s:.0f} s",
                    field="--address", fix=cluster.UNREACHABLE_FIX)


class NodeAgent:
    """One Ray worker node under rlvr's drain-on-SIGTERM (see the module docstring)."""

    def __init__(self, address: str, *, grace_s: float = 120.0, ray_args: Sequence[str] = (),
                 log: TextIO = sys.stderr, warm_images: Sequence[str] = (),
                 image_cache: str | None = None) -> None:
        if grace_s <= 0:
            raise UserError(f"--grace-s {grace_s:g} leaves no time to drain", field="--grace-s",
                            fix="give the seconds between the notice and the kill, e.g. --grace-s 120")
        self.address, self.grace_s, self.ray_args, self.log = address, grace_s, list(ray_args), log
        self.warm_images, self.image_cache = list(warm_images), image_cache
        self.label = uuid.uuid4().hex[:16]
        self.node_id: str | None = None
        self._notice = threading.Event()
        self._signals = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def _say(self, text: str) -> None:
        self.log.write(f"rlvr node: {text}\n")
        self.log.flush()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signals += 1
        if self._signals > 1 and self.proc is not None:
            self.proc.terminate()  # a second notice: stop now
        self._notice.set()

    def warm(self) -> None:
        """Build, pull or load each of `warm_images` and unpack it into this machine's image cache, before the
        node joins: no job placed here waits for them. An image that cannot be had stops the agent
        (UserError)."""
        from rlvr.sandbox.imagecache import Cache, cache_dir, resolve

        cache = Cache(cache_dir(self.image_cache))
        for ref in self.warm_images:
            t0 = time.monotonic()
            root = resolve(ref, cache)
            self._say(f"image {ref} ready: {root.id[:12]} ({time.monotonic() - t0:.1f} s)")

    def run(self) -> int:
        """Warm the images, start the node, wait for the notice or the node's end, drain; the exit status."""
        self.warm()
        cmd = [_ray_command(), "start", "--address", self.address, "--block", "--labels",
               f"{LABEL}={self.label}",
               *self.ray_args]
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.proc = subprocess.Popen(cmd, stdout=sys.stderr, start_new_session=True)  # its own group: no echo
        try:
            self.node_id = find_node(self.address, self.label, alive=lambda: self.proc.poll() is None)
            self._say(f"node {cluster.short(self.node_id)} joined {self.address}")
            while not self._notice.wait(0.5):
                if self.proc.poll() is not None:
                    self._say(f"the Ray node exited with status {self.proc.returncode}")
                    return self.proc.returncode or 1
            return self.drain()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()

    def drain(self) -> int:
        """Drain, then stop the node: at the drained mark or the deadline, whichever is first."""
        assert self.node_id is not None and self.proc is not None
        deadline = time.monotonic() + self.grace_s
        accepted = cluster.drain(self.node_id, self.grace_s, address=self.address)
        self._say(f"draining node {cluster.short(self.node_id)} within {self.grace_s:g} s"
                  + ("" if accepted else " (Ray refused the drain request; stopping at the deadline)"))
        while time.monotonic() < deadline and self.proc.poll() is None:
            if cluster.is_drained(self.node_id, address=self.address):
                self._say("drained: every fleet has left the node")
                break
            if cluster.is_idle(self.node_id, address=self.address):
                self._say("drained: nothing runs on the node")
                break
            time.sleep(0.5)
        else:
            if self.proc.poll() is None:
                self._say("deadline reached: stopping the node with work still on it")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        return 0
