"""What one worker's bubblewrap container holds, built on the host: its filesystem, environment and command
line.

The root holds only read-only system directories, the Python installation (relocated when the sandbox's own
tmpfs would hide it), a fixed /etc, the zygote and `wire.py` at /opt/rlvr, and the pool's control directory at
/.rlvr; a lease's trusted material is staged under its directory (`stage_mounts`) for the zygote to mount.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import workspace
from rlvr.sandbox.base import FileMap
from rlvr.sandbox.cgroups import WorkerCgroup

SANDBOX_UID = 65534
"""The unprivileged user (nobody) that sandboxed programs run as."""
SLIRP_DNS = "10.0.2.3"
"""The DNS forwarder of the user-mode network a pool with network access gives its workers."""
ZYGOTE = Path(__file__).with_name("zygote.py")
WIRE = Path(__file__).with_name("wire.py")
RESERVED = ("/", "/workspace", "/tmp", "/proc", "/dev", "/.rlvr", "/usr", "/etc", "/bin", "/sbin", "/lib",
            "/lib64", "/opt/rlvr")
Mounts = Mapping[str, "str | os.PathLike[str] | FileMap"]
"""Sandbox path -> host directory (copied) or FileMap, mounted read-only for the lease."""


SHADOWED_ROOTS = ("/tmp", "/dev", "/proc", "/workspace", "/.rlvr", "/opt/rlvr")
"""Sandbox paths that hold the sandbox's own mounts: host files under them are not visible inside."""
RELOCATED_PREFIX = "/opt/rlvr/prefix"


def _shadowed(path: str) -> bool:
    return any(path == r or path.startswith(r + "/") for r in SHADOWED_ROOTS)


def inner_interpreter(python: str) -> tuple[str, tuple[str, str] | None]:
    """The interpreter path inside the sandbox, and (host prefix, sandbox prefix) when it had to move.

    A venv under /tmp (a CI checkout, say) would be hidden by the sandbox's fresh /tmp, so its prefix is
    mounted read-only at RELOCATED_PREFIX instead; a venv finds its site-packages from the path it is run as.
    The interpreter's directory is resolved (a venv reached through a linked folder, such as a clone's
    .rlvr-cache, is bound at its real path; the link itself is not in the sandbox), its file name is not (a
    venv's bin/python is a link to the base interpreter, and the venv is found from the unresolved path).
    """
    bindir, name = os.path.split(os.path.abspath(python))
    python = os.path.join(os.path.realpath(bindir), name)
    prefix = os.path.dirname(os.path.dirname(python))
    if not _shadowed(os.path.realpath(prefix)) and not _shadowed(prefix):
        return python, None
    return RELOCATED_PREFIX + python[len(prefix):], (os.path.realpath(prefix), RELOCATED_PREFIX)


def job_env(python: str) -> dict[str, str]:
    """The fixed environment of every job: nothing of the host's leaks in. The interpreter's own directory
    comes first on PATH, so `python`, `pytest` and a venv's other scripts are the sandbox interpreter's."""
    return {"PATH": f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
            "USER": "sandbox", "LOGNAME": "sandbox", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


def find_bwrap() -> str:
    path = shutil.which("bwrap") or ("/usr/bin/bwrap" if os.path.exists("/usr/bin/bwrap") else None)
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed",
                                 fix="apt-get install -y bubblewrap (or `make system-deps`)")
    return path


def write_etc(base: Path) -> Path:
    """The container's /etc files (users, groups, hosts), written under the pool's directory `base`."""
    etc = base / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
                                "sandbox:/tmp:/bin/sh\n")
    (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files\n")
    # bound instead for a pool whose jobs have network access
    (etc / "nsswitch-network.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    (etc / "resolv.conf").write_text(f"nameserver {SLIRP_DNS}\n")
    return etc


@dataclass(frozen=True)
class Container:
    """The layout every worker of one pool shares; `argv` adds what is the worker's own.

    This is the host-root layout; `rlvr.sandbox.image_container.ImageContainer` lays the same jail over an
    image by overriding `root_args`, `opt_args`, `launcher` and `zygote_config`."""

    bwrap: str
    """The bubblewrap binary (`find_bwrap`)."""
    python: str
    """The host interpreter the sandbox runs."""
    inner_python: str
    """Its path inside the sandbox (`inner_interpreter`)."""
    relocated: tuple[str, str] | None
    """(host prefix, sandbox prefix) when the interpreter's prefix had to move, else None."""
    base: Path
    """The pool's control directory, bound at /.rlvr."""
    etc: Path
    """The directory of the container's /etc files (`write_etc`)."""
    env: Mapping[str, str]
    """Every job's environment (`job_env`)."""
    workspace_mb: int
    memory_mb: int
    warm: Sequence[str]
    """Modules the warm template imports."""
    network: bool = False
    """Jobs share the worker's network namespace, which the pool connects to a user-mode network
    (`rlvr.sandbox.network`); False: each job gets a fresh namespace with only a loopback device."""

    def argv(self, cg: WorkerCgroup, lean_rfd: int, info_fd: int = -1) -> list[str]:
        """The bubblewrap command line of one worker: its cgroup binds, the lean template's request pipe when
        it has one (`lean_rfd >= 0`), and bubblewrap's info pipe (`info_fd >= 0`: the worker's PID comes
        back)."""
        a = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--hostname",
             "sandbox", "--die-with-parent", "--new-session"]
        if info_fd >= 0:
            a += ["--info-fd", str(info_fd)]
        a += self.root_args()
        a += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/workspace",
              "--bind", str(self.base), "/.rlvr"]
        for host_dir, name in cg.binds():
            a += ["--bind", str(host_dir), f"/.rlvr/cg/{name}"]
        a += self.opt_args()
        a += ["--chdir", "/", "--clearenv"]
        for k, v in self.supervisor_env().items():
            a += ["--setenv", k, v]
        config = {"uid": SANDBOX_UID, "gid": SANDBOX_UID, "procs": cg.procs_files(),
                  "zygote_procs": cg.zygote_procs_files(), "python": self.inner_python, "fast": True,
                  "workspace_mb": self.workspace_mb, "memory_mb": self.memory_mb,
                  "warm": list(self.warm), "inodes": 20000, "network": self.network, **self.zygote_config()}
        if lean_rfd >= 0:
            config["lean_fd"] = lean_rfd
        return a + self.launcher() + ["/opt/rlvr/zygote.py", json.dumps(config)]

    def root_args(self) -> list[str]:
        """The root's system directories and /etc: the host's, read-only."""
        a = ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                a += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                a += ["--ro-bind", top, top]
        # /etc as a system's is: listable by every user (bwrap would make the directory it creates 0700, and
        # a program that looks for a file of its own there, such as Codex, gets EACCES instead of ENOENT)
        a += ["--perms", "0755", "--dir", "/etc"]
        for f in ("ld.so.cache", "ld.so.conf", "localtime"):
            if os.path.exists(f"/etc/{f}"):
                a += ["--ro-bind", f"/etc/{f}", f"/etc/{f}"]
        if os.path.isdir("/etc/alternatives"):
            a += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
        for f in ("passwd", "group", "hosts"):
            a += ["--ro-bind", str(self.etc / f), f"/etc/{f}"]
        a += ["--ro-bind", str(self.etc / ("nsswitch-network.conf" if self.network else "nsswitch.conf")),
              "/etc/nsswitch.conf"]
        if self.network:
            a += ["--ro-bind", str(self.etc / "resolv.conf"), "/etc/resolv.conf"]
        return a + self._prefix_binds()

    def opt_args(self) -> list[str]:
        """/opt/rlvr: the zygote, `wire.py` and, when it had to move, the interpreter's prefix."""
        a = ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/opt/rlvr",
             "--ro-bind", str(ZYGOTE), "/opt/rlvr/zygote.py", "--ro-bind", str(WIRE), "/opt/rlvr/wire.py"]
        if self.relocated is not None:
            a += ["--ro-bind", self.relocated[0], self.relocated[1]]
        return a

    def supervisor_env(self) -> Mapping[str, str]:
        """The zygote's own environment (a job's is sent with the job)."""
        return self.env

    def launcher(self) -> list[str]:
        """The command that runs the zygote script."""
        return [self.inner_python]

    def zygote_config(self) -> dict[str, object]:
        """What this layout changes in the zygote's configuration."""
        return {}

    def _prefix_binds(self) -> list[str]:
        """Read-only binds of the Python installation outside /usr: the base and the running prefix, and the
        chosen interpreter's own prefix too (a venv outside this one finds its site-packages there)."""
        a: list[str] = []
        made: set[str] = set()
        own_prefix = os.path.dirname(os.path.dirname(os.path.abspath(self.python)))
        prefixes = {os.path.realpath(p)
                    for p in (sys.base_prefix, sys.prefix, Path(self.python).parent, own_prefix)}
        prefixes.add(sys.prefix)
        if self.relocated is not None:
            prefixes.discard(self.relocated[0])
        for prefix in sorted(p for p in prefixes if not p.startswith("/usr/") and not _shadowed(p)):
            for anc in _ancestors(prefix):  # bwrap would copy the host's modes (/root is 0700)
                if anc not in made:
                    made.add(anc)
                    a += ["--perms", "0755", "--dir", anc]
            a += ["--ro-bind", prefix, prefix]
        return a


def _ancestors(path: str) -> list[str]:
    """/a/b/c -> ["/a", "/a/b"]."""
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _check_target(target: str, what: str) -> None:
    norm = os.path.normpath(target)
    if not target.startswith("/") or norm != target or any(
            norm == r or (r != "/" and norm.startswith(r + "/")) for r in RESERVED):
        raise ValueError(f"{what} target {target!r} must be a normalised absolute path outside {RESERVED}")


def stage_scratch(scratch: Sequence[str], mounts: Mounts) -> list[list[str]]:
    """[name under the lease dir, sandbox target] pairs of a lease's scratch directories: each run sees them
    fresh and empty, and the zygote copies what the run left there to the lease dir after it. A target may
    not lie inside another target or a mount's."""
    targets = sorted(set(scratch))
    for target in targets:
        _check_target(target, "scratch")
        for other in [*targets, *mounts]:
            if other != target and (other.startswith(target + "/") or target.startswith(other + "/")):
                raise ValueError(f"scratch target {target!r} overlaps {other!r}")
        if target in mounts:
            raise ValueError(f"scratch target {target!r} is also a mount target")
    return [[f"rw{i}", target] for i, target in enumerate(targets)]


def stage_mounts(lease_dir: Path, mounts: Mounts) -> list[list[str]]:
    """Copy trusted material under the lease dir; return [relative source, sandbox target] pairs."""
    staged: list[list[str]] = []
    for i, (target, source) in enumerate(sorted(mounts.items())):
        _check_target(target, "mount")
        rel = f"ro/{i}"
        if isinstance(source, Mapping):
            (lease_dir / rel).mkdir(parents=True)
            workspace.write_files(lease_dir / rel, source)
        else:
            src = Path(source)
            if not src.is_dir():
                raise ValueError(f"mount source {str(src)!r} is not a directory")
            shutil.copytree(src, lease_dir / rel, symlinks=True)
        staged.append([rel, target])
    return staged
