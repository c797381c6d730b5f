"""Pure pieces of the in-sandbox worker: which `python` invocations run in the warm interpreter."""
from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from rlvr.sandbox.zygote import python_fast_path


@pytest.mark.parametrize("args,expected", [
    (["-c", "print(1)", "a"], ("-c", "print(1)", ["a"])),
    (["-m", "pytest", "-q"], ("-m", "pytest", ["-q"])),
    (["script.py", "x"], ("script", "script.py", ["x"])),
    (["-u", "-c", "x"], None),
    (["-"], None),
    ([], None),
    (["-c"], None),
])
def test_fast_path_only_for_plain_invocations(args: list[str], expected: object) -> None:
    assert python_fast_path(args) == expected


MOUNT_FROM_A_THREADED_PROCESS = r"""
import ctypes, os, sys, threading, time
from rlvr.sandbox import wire
from rlvr.sandbox.zygote import _InMountNamespace

r, w = os.pipe()
child = os.fork()
if child == 0:  # a process in a mount namespace of its own, as a job's D is
    wire.check_rc(wire.libc.unshare(wire.CLONE_NEWNS), "unshare")
    wire.mount(None, "/", None, wire.MS_REC | wire.MS_PRIVATE)
    os.write(w, b"x")
    time.sleep(30)
    os._exit(0)
os.read(r, 1)
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # a warm-up that left a thread running
assert len(os.listdir("/proc/self/task")) > 1
ns = os.open(f"/proc/{child}/ns/mnt", os.O_RDONLY)
own = os.open("/proc/self/ns/mnt", os.O_RDONLY)
target = sys.argv[1]
if sys.argv[2] == "plain":  # what the zygote did before: setns from a thread that shares its fs context
    rc = wire.libc.setns(ns, wire.CLONE_NEWNS)
    print("plain", rc, ctypes.get_errno())
else:
    with _InMountNamespace(ns, own):
        wire.mount("tmpfs", target, "tmpfs", 0, "size=1m")
    with open(f"/proc/{child}/mountinfo") as f:
        theirs = any(line.split()[4] == target for line in f)
    with open("/proc/self/mountinfo") as f:
        ours = any(line.split()[4] == target for line in f)
    print("mounted", theirs, ours)
os.kill(child, 9)
"""


def test_a_template_with_threads_still_mounts_into_a_jobs_namespace(tmp_path) -> None:
    """A warm-up that starts native threads (bpy does) must not cost the jobs their read-only mounts."""
    target = tmp_path / "mnt"
    target.mkdir()
    run = [sys.executable, "-c", MOUNT_FROM_A_THREADED_PROCESS, str(target)]
    plain = subprocess.run([*run, "plain"], capture_output=True, text=True, timeout=60, check=True)
    assert plain.stdout.split() == ["plain", "-1", str(errno.EINVAL)]  # the kernel's refusal the fix is for
    fixed = subprocess.run([*run, "fixed"], capture_output=True, text=True, timeout=60, check=True)
    assert fixed.stdout.split() == ["mounted", "True", "False"], fixed.stderr
