"""Trusted supervisor of the c domain's hidden harness (a standalone script: the image's Python, stdlib only).

Copied from the pristine package into a fresh verification sandbox, after the agent is done, and run as
`python judge/supervisor.py`. Its stdin carries the config (one JSON line), then the key that signs its one
result line. It:

1. makes itself undumpable, so no other process of the job's user can read its memory or open its
   descriptors (the key, the sealed harness binary);
2. compiles the candidate's `src/*.c` and the harness with AddressSanitizer and UBSan, side by side; a
   harness that does not compile is the toolchain's fault (infra), anything of the candidate's that does
   not compile or link is the candidate's;
3. records what the candidate's objects define and reference (`nm`) and what its preprocessed sources say
   about the sanitizers (a `no_sanitize` attribute survives any macro once expanded);
4. seals the linked binary in a memfd and removes every harness file from the workspace, so no case can
   read or replace the harness;
5. runs each case in its own process (its own session, stdin closed, output to capped files), kills
   everything else of the job's user after each case, and records exit status, signal, time-out and the
   head of its output;
6. prints one line: MARK, the HMAC of the payload under the key, the payload (JSON).

The candidate's code runs only in the case processes, never in this one.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

MARK = "RLVR-C-RESULT"
BUILD = "/tmp/rlvr-c-build"
FLAGS = ["-std=c11", "-O0", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-common"]
OUT_CAP = 16 << 10
ERR_CAP = 2 << 10
SANITIZED = re.compile(r"no_sanitize|no_address_safety_analysis|disable_sanitizer_instrumentation|"
                       r"__(?:asan|lsan|ubsan|sanitizer|msan|tsan|hwasan)_")
CASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp",
            # the harness counts what a case leaves allocated itself (reachable or not), so LeakSanitizer's
            # own pass at exit, the slowest part of a short case, is not needed
            "ASAN_OPTIONS": "detect_leaks=0:exitcode=23:symbolize=0:abort_on_error=0:"
                            "allocator_may_return_null=1",
            "LSAN_OPTIONS": "exitcode=23", "UBSAN_OPTIONS": "halt_on_error=1:exitcode=24:print_stacktrace=0"}


def undumpable() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except OSError:
        pass


def run(argv: list[str], timeout: float, env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = (),
        cwd: str | None = None) -> dict:
    """One process, its output in capped files; everything it left behind killed afterwards."""
    with open(f"{BUILD}.out", "w+b") as out, open(f"{BUILD}.err", "w+b") as err:
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=env or CASE_ENV, pass_fds=pass_fds, cwd=cwd, start_new_session=True)
        except OSError as exc:
            return {"rc": 127, "signal": None, "timeout": False, "out": "", "err": str(exc), "s": 0.0}
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        sweep(proc.pid)
        proc.wait()
        out.seek(0)
        err.seek(0)
        rc = proc.returncode
        return {"rc": rc if rc >= 0 else None, "signal": -rc if rc < 0 else None, "timeout": timed_out,
                "out": out.read(OUT_CAP).decode("utf-8", "replace"),
                "err": err.read(ERR_CAP).decode("utf-8", "replace"), "s": round(time.monotonic() - t0, 4)}


JAILED = os.getpid() == 2
"""Whether this runs as rlvr's jail runs a job: the second process of a PID namespace of its own, under an
init that only waits. Only there may everything else this user can signal be killed (`kill(-1)`): anywhere
else (a container run as root, an unisolated pool) that would be other people's processes."""


def sweep(pgid: int) -> None:
    """Kill the process group and, in rlvr's jail, every other process of the job's user (a daemon that left
    the group); the namespace's init and this process are spared by the kernel."""
    for target in (-pgid, -1) if JAILED else (-pgid,):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass


def symbols(objects: list[str]) -> dict[str, list[str]]:
    res = subprocess.run(["nm", "-P", *objects], capture_output=True, text=True, check=False)
    found: dict[str, list[str]] = {"defined": [], "undefined": []}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not parts[0].endswith(":"):
            found["undefined" if parts[1] in ("U", "w", "v") else "defined"].append(parts[0])
    return found


def sanitizer_mentions(preprocessed: list[str]) -> list[dict]:
    """Lines of the candidate's own files, as the preprocessor left them (every macro expanded), that name a
    sanitizer or turn one off."""
    hits = []
    cwd = os.getcwd()
    for path in preprocessed:
        with open(path, encoding="utf-8", errors="replace") as f:
            current = path
            for line in f:
                if line.startswith("# "):
                    parts = line.split('"')
                    current = parts[1] if len(parts) > 1 else current
                    continue
                if current.startswith(cwd) and SANITIZED.search(line):
                    hits.append({"file": current[len(cwd) + 1:], "seen": line.strip()[:200]})
    return hits[:20]


def build(cfg: dict) -> tuple[dict, str | None]:
    shutil.rmtree(BUILD, ignore_errors=True)
    os.makedirs(f"{BUILD}/cand")
    os.makedirs(f"{BUILD}/judge")
    cwd = os.getcwd()
    sources = [os.path.join(cwd, s) for s in cfg["sources"]]
    env = {**CASE_ENV, "TMPDIR": "/tmp"}
    # the harness is trusted code: AddressSanitizer sees every access of its to the candidate's memory, and
    # UBSan, which only judges the code it instruments, would only slow its (long) compile
    harness_flags = [f for f in FLAGS if not f.startswith("-fsanitize=")] + ["-fsanitize=address"]
    procs = {f"harness {unit}": subprocess.Popen(["gcc", "-c", *harness_flags, f"{cwd}/{unit}"],
                                                  cwd=f"{BUILD}/judge", stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, env=env)
             for unit in cfg["harness"]}
    if sources:
        # -save-temps=obj keeps what the preprocessor made of each source: scanned below, no second pass
        procs["candidate"] = subprocess.Popen(["gcc", "-c", "-save-temps=obj", *FLAGS, f"-I{cwd}/include",
                                               *sources],
                                              cwd=f"{BUILD}/cand", stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, env=env)
    report: dict = {"times": {}}
    t0 = deadline = time.monotonic()
    deadline += cfg["compile_timeout_s"]
    for name, proc in procs.items():
        try:
            out = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))[0]
        except subprocess.TimeoutExpired:  # a source that takes forever to compile is its author's
            proc.kill()
            out = proc.communicate()[0] + b"\ncompilation timed out"
        report[name] = {"rc": proc.returncode, "log": out.decode("utf-8", "replace")[-4000:]}
    report["times"]["compile"] = round(time.monotonic() - t0, 4)
    broken = [name for name in procs if name.startswith("harness") and report[name]["rc"] != 0]
    if broken:
        report["harness"] = report[broken[0]]
        return report, "toolchain"
    if not sources or report["candidate"]["rc"] != 0:
        return report, "candidate"
    made = sorted(os.listdir(f"{BUILD}/cand"))
    objects = [f"{BUILD}/cand/{f}" for f in made if f.endswith(".o")]
    t0 = time.monotonic()
    report["symbols"] = symbols(objects)
    report["sanitizer_mentions"] = sanitizer_mentions([f"{BUILD}/cand/{f}" for f in made if f.endswith(".i")])
    report["times"]["inspect"] = round(time.monotonic() - t0, 4)
    t0 = time.monotonic()
    judged = sorted(f"{BUILD}/judge/{f}" for f in os.listdir(f"{BUILD}/judge") if f.endswith(".o"))
    link = subprocess.run(["gcc", "-fsanitize=address,undefined", "-o", f"{BUILD}/run", *judged, *objects],
                          capture_output=True, text=True, env=env, check=False)
    report["link"] = {"rc": link.returncode, "log": (link.stdout + link.stderr)[-4000:]}
    report["times"]["link"] = round(time.monotonic() - t0, 4)
    return report, None if link.returncode == 0 else "candidate"


def sealed(path: str) -> int:
    """The binary at `path` in a sealed memfd (nothing can change it), the file removed."""
    fd = os.memfd_create("rlvr-harness", os.MFD_ALLOW_SEALING)
    with open(path, "rb") as f:
        os.write(fd, f.read())
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def main() -> int:
    undumpable()
    cfg = json.loads(sys.stdin.readline())
    key = sys.stdin.readline().strip().encode()
    payload: dict = {"version": 1}
    try:
        payload["build"], fault = build(cfg)
    except (OSError, subprocess.SubprocessError) as exc:
        payload["build"], fault = {"error": f"{type(exc).__name__}: {exc}"}, "toolchain"
    for name in cfg["judge_files"]:  # nothing of the harness stays where a case could read it
        try:
            os.unlink(name)
        except OSError:
            pass
    payload["fault"] = fault
    if fault is None:
        fd = sealed(f"{BUILD}/run")
        shutil.rmtree(BUILD, ignore_errors=True)
        os.makedirs(BUILD, exist_ok=True)
        t0 = time.monotonic()
        payload["cases"] = [run([f"/proc/self/fd/{fd}", str(k)], cfg["case_timeout_s"], pass_fds=(fd,))
                            for k in range(cfg["cases"])]
        payload["build"]["times"]["cases"] = round(time.monotonic() - t0, 4)
    body = json.dumps(payload, separators=(",", ":"))
    sig = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    sys.stdout.write(f"{MARK} {sig} {body}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
