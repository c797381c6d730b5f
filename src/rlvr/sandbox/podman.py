"""The one container tool rlvr drives: podman builds Dockerfiles, pulls or loads images from every transport
into its local store, reports their config, and mounts them read-only for unpacking.

Why podman alone (docs/IMAGES.md): it reads every transport rlvr accepts (`podman pull oci:DIR`,
`docker-archive:`, `oci-archive:`, a registry), builds with buildah inside, and `podman image mount` hands
over an image's merged root in milliseconds, with the kernel's overlayfs applying the layers' whiteouts, where
`umoci raw unpack` after a `podman save` took about 12 s here, plus the save. skopeo and umoci would add a
second copy of each image and nothing rlvr needs.

podman runs with rlvr's own containers.conf (beside this module; `$CONTAINERS_CONF` wins when set): RUN steps
use runc with cgroupfs and fixed ulimits, because crun 1.8 refuses the hybrid cgroup v1/v2 hosts rlvr runs on
and root there may not raise rlimits.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import UserError

CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
"""rlvr's podman configuration (see the module docstring)."""
INSTALL_FIX = "install podman and runc (apt-get install -y podman runc, or `make images`)"
BUILD_TIMEOUT_S = 3600.0
"""Limit of one image build."""
PULL_TIMEOUT_S = 900.0
"""Limit of one pull or load."""
_STEP = re.compile(r"^STEP (\d+)/(\d+): (.*)$")
_BUILD_ERROR = re.compile(r'^Error: (?:building at STEP "(.*?)": )?(.*)$')


class ImageError(UserError):
    """An image that cannot be had: one line naming the image (or its Dockerfile) and the fix."""


@dataclass(frozen=True)
class Inspected:
    """What `podman image inspect` says about one image."""

    id: str
    """The image ID: the sha256 digest of its config, without the `sha256:` prefix."""
    config: dict[str, Any]
    """The OCI config's `config` object (Env, WorkingDir, User, Entrypoint, Cmd; absent keys left out)."""
    names: tuple[str, ...]
    """Its tags in the store."""
    size: int
    """Bytes, as the store counts them."""


def environment() -> dict[str, str]:
    """The environment podman runs in: this process's, with rlvr's containers.conf unless one is set."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def binary() -> str:
    found = shutil.which("podman")
    if found is None:
        raise ImageError("podman is not installed", field="image", fix=INSTALL_FIX)
    return found


def run(args: Sequence[str], *, timeout_s: float = 120.0,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """`podman ARGS`, captured; a failure (check=True) is an ImageError carrying podman's last error line."""
    try:
        res = subprocess.run([binary(), *args], capture_output=True, text=True, timeout=timeout_s,
                             check=False, env=environment(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ImageError(f"podman {args[0]} took longer than {timeout_s:.0f} s", field="image",
                         fix="check `podman info`, then try again") from None
    if check and res.returncode != 0:
        raise ImageError(f"podman {' '.join(args[:2])} failed: {last_error(res.stderr)}", field="image",
                         fix="check `podman info`")
    return res


def last_error(text: str) -> str:
    """podman's last `Error: ...` line (or last line), one line, without the prefix."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    line = (errors or lines or ["no message"])[-1]
    return " ".join(line.removeprefix("Error:").split())[:400]


def inspect(name: str) -> Inspected | None:
    """The image `name` (a reference or an ID) in the local store; None when the store has no such image."""
    res = run(["image", "inspect", "--format", "json", name], check=False)
    if res.returncode != 0:
        return None
    info = json.loads(res.stdout)[0]
    config = {k: v for k, v in (info.get("Config") or {}).items() if v not in (None, "", [], {})}
    if info.get("User") and "User" not in config:
        config["User"] = info["User"]
    return Inspected(info["Id"].removeprefix("sha256:"), config, tuple(info.get("RepoTags") or ()),
                     int(info.get("Size") or 0))


def pull(source: str, *, what: str) -> str:
    """Bring `source` (a transport:path or a fully qualified registry reference) into the store; its image ID.

    `what` names the image in the error, which says how to get it without a registry."""
    res = run(["pull", "--quiet", source], timeout_s=PULL_TIMEOUT_S, check=False)
    ids = res.stdout.split()
    if res.returncode != 0 or not ids:
        raise ImageError(f"image {what} cannot be pulled: {last_error(res.stderr)}", field="image",
                         fix="build it from a Dockerfile (dockerfile:DIR) or load an archive "
                             "(docker-archive:FILE.tar, oci:DIR); `make images` provides "
                             "debian:bookworm-slim offline")
    return ids[-1].removeprefix("sha256:")


def tags() -> dict[str, str]:
    """Every name in the local store -> the image ID it names."""
    res = run(["images", "--no-trunc", "--format", "json"], check=False)
    if res.returncode != 0:
        return {}
    return {name: img["Id"].removeprefix("sha256:") for img in json.loads(res.stdout or "[]")
            for name in img.get("Names") or ()}


def forget(image_id: str, before: dict[str, str]) -> None:
    """Undo what a pull of an archive or a layout left in the store (`before`: `tags()` taken before it): the
    names it added (podman names an OCI layout after its path), and the image itself when it was not there
    before and nothing else names it. rlvr keeps its own unpacked copy; a store full of path-named images
    helps nobody."""
    info = inspect(image_id)
    if info is None:
        return
    added = [n for n in info.names if n not in before]
    for name in added:
        run(["untag", image_id, name], check=False)
    if image_id not in before.values() and len(added) == len(info.names):
        run(["rmi", image_id], check=False)


def build(context: Path, dockerfile: Path, tag: str) -> str:
    """Build a Dockerfile; its image ID. A failed build is one line naming the Dockerfile and the failing
    step, with podman's whole output kept in a log file named in the message."""
    with tempfile.TemporaryDirectory(prefix="rlvr-build-") as tmp:
        iid = Path(tmp) / "iid"
        log = tempfile.NamedTemporaryFile(prefix="rlvr-build-", suffix=".log", delete=False)  # noqa: SIM115
        with log:
            try:
                res = subprocess.run([binary(), "build", "--layers", "--pull=missing", "-f", str(dockerfile),
                                      "--iidfile", str(iid), "-t", tag, str(context)], stdout=log,
                                     stderr=subprocess.STDOUT, env=environment(), timeout=BUILD_TIMEOUT_S,
                                     stdin=subprocess.DEVNULL, check=False)
                rc = res.returncode
            except subprocess.TimeoutExpired:
                rc = -1
        text = Path(log.name).read_text(errors="replace")
        if rc == 0 and iid.is_file():
            os.unlink(log.name)
            return iid.read_text().strip().removeprefix("sha256:")
    too_long = ("", f"the build took longer than {BUILD_TIMEOUT_S:.0f} s")
    step, reason = failed_step(text) if rc != -1 else too_long
    raise ImageError(f"the build failed{' at ' + step if step else ''}: {reason}", file=dockerfile,
                     fix=f"fix that step and build again with `rlvr images build dockerfile:{context}` "
                         f"(podman's output: {log.name})")


def failed_step(output: str) -> tuple[str, str]:
    """("STEP n/m: INSTRUCTION", why) of a failed `podman build` from its combined output."""
    step, reason = "", ""
    for line in output.splitlines():
        m = _STEP.match(line.strip())
        if m:
            step = f"step {m.group(1)}/{m.group(2)} ({' '.join(m.group(3).split())[:160]})"
        e = _BUILD_ERROR.match(line.strip())
        if e:
            reason = " ".join(e.group(2).split())[:300]
    return step, reason or last_error(output)


def mount(image_id: str) -> str:
    """Mount an image read-only (its merged root, whiteouts applied); the mount point. Unmount when done."""
    return run(["image", "mount", image_id]).stdout.strip()


def unmount(image_id: str) -> None:
    run(["image", "unmount", image_id], check=False)
