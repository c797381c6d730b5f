"""The same jail over an image's root: what one worker's bubblewrap container holds when its tasks run in an
image.

The root is bubblewrap's tmpfs with each top-level entry of the cached image root bound read-only (its
symlinks recreated, never followed on the host), so mount points can still be made at the top; bubblewrap 0.8
cannot make them on a read-only root. Over the image: rlvr's /etc/passwd, group, hosts and resolv.conf
(`rootfs.synth_etc`), fresh /proc, /dev and /tmp, the pool's control directory at /.rlvr, and /opt/rlvr, a
read-only tmpfs holding the zygote. Everything below the root (namespaces, seccomp, cgroups, the unprivileged
user, the per-job chain) is the zygote's, unchanged.

The zygote needs a Python, and it runs as root inside the worker's namespaces, so which one matters:

- `image`: the image's own interpreter (`ImageRoot.python`, 3.9 or later with ctypes). Jobs named `python`
  fork from it warm, as on the host. The image's interpreter and the modules it imports while warming up then
  run as that root: trust the image as you trust the host's Python (docs/SECURITY.md).
- `host`: the host's interpreter, brought in read-only at /opt/rlvr/host and started through the host's own
  dynamic loader with the host's libraries (`--inhibit-cache`, so nothing of the image's libc or its
  ld.so.cache is loaded; an image's /etc/ld.so.preload is masked), in isolated mode without site. No code of
  the image runs with privilege. Each job is exec'd; every job's mount namespace unmounts /opt/rlvr/host (and
  the mask) before the program starts, so programs see the image alone. The pool uses this where the image has
  no usable Python, or when told not to trust it.
"""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

from rlvr.sandbox.container import WIRE, ZYGOTE, Container
from rlvr.sandbox.imagecache import ImageRoot
from rlvr.sandbox.rootfs import DEFAULT_PATH

HOST_DIR = "/opt/rlvr/host"
"""Where the host's interpreter and libraries are bound in an image worker (hidden from jobs)."""
SKIPPED = frozenset({"proc", "dev", "tmp", "workspace", ".rlvr"})
"""Top-level entries of an image the worker replaces with its own."""
ZYGOTE_MODULES = ("ctypes", "json", "select", "resource", "_socket", "struct", "runpy", "types", "atexit",
                  "importlib", "signal", "gc")
"""Modules the zygote imports: their shared libraries decide which host library directories are bound."""


@dataclass(frozen=True)
class HostRuntime:
    """The host's interpreter as an image worker runs it (see the module docstring)."""

    binds: tuple[tuple[str, str], ...]
    """(host path, path in the worker) pairs, all read-only."""
    launcher: tuple[str, ...]
    """The command that starts the interpreter: the host's loader, its library path, the interpreter, its
    flags."""


@functools.cache
def host_runtime() -> HostRuntime:
    """Find the host's base interpreter, its prefix, the dynamic loader and the directories of the shared
    libraries the zygote's modules load (read from this process's own mappings after importing them)."""
    import importlib

    for name in ZYGOTE_MODULES:
        importlib.import_module(name)
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    loader, libdirs = "", []
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if "/" in line else ""
            if not path.startswith("/") or ".so" not in path:
                continue
            if "/ld-linux" in path or "/ld64.so" in path or "/ld-musl" in path:
                loader = os.path.realpath(path)
            d = os.path.dirname(os.path.realpath(path))
            if not d.startswith(prefix + "/") and d not in libdirs:
                libdirs.append(d)
    if not loader or not exe.startswith(prefix + "/"):
        raise RuntimeError(f"cannot bring the host's interpreter into an image (loader {loader!r}, {exe})")
    binds = [(prefix, f"{HOST_DIR}/prefix"), (loader, f"{HOST_DIR}/ld.so")]
    binds += [(d, f"{HOST_DIR}/lib{i}") for i, d in enumerate(libdirs)]
    inner = f"{HOST_DIR}/prefix/{os.path.relpath(exe, prefix)}"
    search = [f"{HOST_DIR}/prefix/lib", *(f"{HOST_DIR}/lib{i}" for i in range(len(libdirs)))]
    launcher = (f"{HOST_DIR}/ld.so", "--inhibit-cache", "--library-path", ":".join(search), "--argv0", inner,
                inner, "-E", "-S")
    return HostRuntime(tuple(binds), launcher)


def image_env(root: ImageRoot) -> dict[str, str]:
    """Every job's environment in an image: rlvr's fixed defaults, then the image's ENV over them (the image's
    PATH, LANG and the like win; nothing of the host's enters)."""
    env = {"PATH": DEFAULT_PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "TZ": "UTC",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    env.update(root.env_map())
    return env


@dataclass(frozen=True)
class ImageContainer(Container):
    """A worker's container over an image root (see the module docstring)."""

    image: ImageRoot | None = None
    """The cached image."""
    supervisor: str = "image"
    """`image`: the zygote runs on the image's Python; `host`: on the host's, brought in (module
    docstring)."""
    probe: bool = False
    """`host` only: `python -c/-m/script` jobs run in the host interpreter the zygote runs on, which stays
    visible (the containment self-test's programs in an image without Python); never for tasks."""

    @property
    def root(self) -> ImageRoot:
        assert self.image is not None
        return self.image

    def root_args(self) -> list[str]:
        """Each top-level entry of the image, read-only; the synthesised /etc files over the image's."""
        a: list[str] = []
        fs = self.root.rootfs
        for entry in sorted(os.scandir(fs), key=lambda e: e.name):
            if entry.name in SKIPPED:
                continue
            if entry.is_symlink():
                a += ["--symlink", os.readlink(entry.path), f"/{entry.name}"]
            elif entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                a += ["--ro-bind", entry.path, f"/{entry.name}"]
        etc = self.root.etc
        for f in ("passwd", "group", "hosts"):
            a += ["--ro-bind", str(etc / f), f"/etc/{f}"]
        return a + ["--ro-bind", str(etc / ("resolv-network.conf" if self.network else "resolv.conf")),
                    "/etc/resolv.conf"]

    def opt_args(self) -> list[str]:
        a = ["--perms", "0755", "--tmpfs", "/opt/rlvr", "--ro-bind", str(ZYGOTE), "/opt/rlvr/zygote.py",
             "--ro-bind", str(WIRE), "/opt/rlvr/wire.py"]
        if self.supervisor == "host":
            # bwrap would make it 0700; the self-test's programs read it
            a += ["--perms", "0755", "--dir", HOST_DIR]
            for src, dst in host_runtime().binds:
                a += ["--ro-bind", src, dst]
            if self.root.ld_preload:  # the host's loader would read the image's preload list
                a += ["--ro-bind", str(self.root.etc / "empty"), "/etc/ld.so.preload"]
        return a + ["--remount-ro", "/opt/rlvr"]

    def supervisor_env(self) -> dict[str, str]:
        if self.supervisor == "host":  # C locale and UTC: the host's interpreter reads no locale or zone file
            return {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "TZ": "UTC"}
        return dict(self.env)

    def launcher(self) -> list[str]:
        if self.supervisor == "host":
            return list(host_runtime().launcher)
        assert self.root.python is not None
        return [self.root.python]

    def zygote_config(self) -> dict[str, object]:
        host = self.supervisor == "host"
        hide = [] if not host or self.probe else [dst for _, dst in host_runtime().binds]
        if host and self.root.ld_preload:
            hide.append("/etc/ld.so.preload")
        return {"uid": self.root.uid, "gid": self.root.gid, "workdir": self.root.workdir, "hide": hide,
                "python": None if host else self.root.python, "fast": self.probe or not host}


def supervisor_for(root: ImageRoot, trust_python: bool) -> str:
    """`image` where the image has a Python the zygote can run on and it may be trusted with it, else
    `host`."""
    return "image" if root.python and trust_python else "host"
