"""The isolated pool: hostile programs are contained and classified; leases, mounts, recovery, determinism."""
from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from rlvr.sandbox.pool import BwrapPool
from rlvr.sandbox.result import ExecLimits, ExecStatus
from rlvr.sandbox.selftest import processes_named
from tests.conftest import child_pids
from tests.sandbox.conftest import TIGHT

HOSTILE = {
    "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
                  ExecStatus.process_limit),
    "memory_bomb": ("x = []\nwhile True:\n    x.append(bytearray(8 * 2**20))", ExecStatus.memory_limit),
    "disk_fill": ("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * 2**20)\n    i += 1",
                  ExecStatus.file_limit),
    "big_file": ("open('big', 'wb').write(b'x' * 6 * 2**20)", ExecStatus.file_limit),
    "tmp_fill": ("f = open('/tmp/x', 'wb')\nwhile True:\n    f.write(b'x' * 2**20)", ExecStatus.file_limit),
    "endless_output": ("while True:\n    print('y' * 1000)", ExecStatus.output_limit),
    "endless_stderr": ("import sys\nwhile True:\n    sys.stderr.write('e' * 1000)", ExecStatus.output_limit),
    "sleeper": ("import time\ntime.sleep(60)", ExecStatus.timeout),
    "busy_loop": ("while True:\n    pass", ExecStatus.timeout),
    "closes_stdout_and_sleeps": ("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)",
                                 ExecStatus.timeout),
    "shell_fork_bomb": (None, ExecStatus.process_limit),
    "segfault": ("import ctypes\nctypes.string_at(0)", ExecStatus.exit_nonzero),
    "abort": ("import os\nos.abort()", ExecStatus.exit_nonzero),
    "exit_code": ("raise SystemExit(7)", ExecStatus.exit_nonzero),
}


def _argv(name: str, code: str | None) -> list[str]:
    if name == "shell_fork_bomb":
        return ["sh", "-c", "b() { b | b & }; b; sleep 5"]
    return ["python", "-c", code or ""]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_program_is_contained_and_classified(pool: BwrapPool, name: str) -> None:
    code, expected = HOSTILE[name]
    r = pool.run(_argv(name, code), limits=TIGHT)
    assert r.status is expected, (r.status, r.exit_code, r.signal, r.stderr[-300:])
    assert len(r.stdout) <= TIGHT.output_bytes and len(r.stderr) <= TIGHT.output_bytes
    assert pool.run(["python", "-c", "print('next')"]).stdout == "next\n"  # the worker survived


def test_endless_output_is_capped_and_flagged(pool: BwrapPool) -> None:
    r = pool.run(["python", "-c", "while True:\n    print('y' * 1000)"], limits=TIGHT)
    assert r.stdout_truncated and len(r.stdout) == TIGHT.output_bytes and r.wall_s < TIGHT.timeout_s


def test_memory_bomb_reports_peak_near_the_limit(pool: BwrapPool) -> None:
    r = pool.run(["python", "-c", "x = bytearray(200 * 2**20)"], limits=TIGHT)
    assert r.status is ExecStatus.memory_limit and r.peak_memory_mb > 0.8 * TIGHT.memory_mb


def test_detached_daemon_dies_with_its_job(pool: BwrapPool) -> None:
    name = "rlvrt" + os.urandom(4).hex()
    code = (f"import ctypes, os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)\n        time.sleep(60)\n"
            f"    os._exit(0)\ntime.sleep(0.3)\nprint('parent done')")
    r = pool.run(["python", "-c", code], limits=TIGHT)
    assert r.ok and r.stdout == "parent done\n"
    assert processes_named(name) == []


def test_background_shell_job_dies_with_its_job(pool: BwrapPool) -> None:
    name = "rlvrs" + os.urandom(4).hex()
    r = pool.run(["sh", "-c", f"(exec -a {name} sleep 60) & echo started"], limits=TIGHT)
    assert r.ok and "started" in r.stdout
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, name)]


def _cmdline_has(p: Path, needle: str) -> bool:
    try:
        return needle in (p / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_host_loopback_is_unreachable(pool: BwrapPool) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.5)
    try:
        port = srv.getsockname()[1]
        r = pool.run(["python", "-c", (f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 1)\n"
                                       "print('CONNECTED')")], limits=TIGHT)
        assert r.status is ExecStatus.exit_nonzero and "CONNECTED" not in r.stdout
        with pytest.raises(TimeoutError):
            srv.accept()
    finally:
        srv.close()


def test_no_network_interfaces_but_loopback(pool: BwrapPool) -> None:
    r = pool.run(["python", "-c", "import socket\nprint(sorted(n for _, n in socket.if_nameindex()))"])
    assert r.ok and r.stdout.strip() == "['lo']"


def test_shadow_and_planted_secret_are_unreadable(pool: BwrapPool, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-" + os.urandom(4).hex())
    for target in ("/etc/shadow", str(secret), "/root/.bashrc", "/work/main/pyproject.toml"):
        r = pool.run(["python", "-c", f"print(open({target!r}).read())"], limits=TIGHT)
        assert r.status is ExecStatus.exit_nonzero, target
        assert "TOPSECRET" not in r.stdout and "root:" not in r.stdout


def test_secret_environment_variables_never_enter(pool: BwrapPool, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.setenv(key, "leak-" + key)
    r = pool.run(["sh", "-c", "env; cat /proc/1/environ | tr '\\0' '\\n'"])
    assert r.ok and "leak-" not in r.stdout + r.stderr
    assert "PYTHONHASHSEED=0" in r.stdout and "TZ=UTC" in r.stdout


def test_writes_outside_the_workspace_fail(pool: BwrapPool, tmp_path: Path) -> None:
    target = tmp_path / "written"
    code = (f"import os\nfor t in ['/usr/x', '/etc/x', '/x', '/opt/rlvr/zygote.py', {str(target)!r}]:\n"
            f"    try:\n        open(t, 'w').write('x')\n        print('WROTE', t)\n    except OSError:\n   "
            f"     pass\n"
            f"open('/workspace/ok', 'w').write('x')\nprint('ok')")
    r = pool.run(["python", "-c", code])
    assert r.ok and r.stdout == "ok\n" and not target.exists()


def test_killing_its_parent_harms_no_one(pool: BwrapPool) -> None:
    code = ("import os, signal\nfor pid in [os.getppid(), 1, -1]:\n    try:\n        os.kill(pid, "
            "signal.SIGKILL)\n"
            "    except OSError as e:\n        print(type(e).__name__)\nprint('alive')")
    r = pool.run(["python", "-c", code], limits=TIGHT)
    assert r.status is not ExecStatus.infra_error and r.attempts == 1
    assert pool.run(["python", "-c", "print(1)"]).stdout == "1\n"


def test_ptrace_of_other_processes_is_refused(pool: BwrapPool) -> None:
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print([p for p in range(1, 200) if p != os.getpid() and libc.ptrace(16, p, 0, 0) == 0])")
    r = pool.run(["python", "-c", code], limits=TIGHT)
    assert r.ok and r.stdout.strip() == "[]"


def test_runs_unprivileged_with_no_new_privs_in_its_own_pid_namespace(pool: BwrapPool) -> None:
    r = pool.run(["sh", "-c",
                  "id -u; grep -E 'NoNewPrivs|CapEff' /proc/self/status; ls /proc | grep -c '^[0-9]'"])
    lines = r.stdout.split()
    assert lines[0] == "65534" and "NoNewPrivs:" in lines and lines[lines.index("NoNewPrivs:") + 1] == "1"
    assert lines[lines.index("CapEff:") + 1] == "0000000000000000"
    assert int(lines[-1]) <= 6  # init, the shell, grep/ls: no host or worker processes visible


def test_lease_keeps_files_between_runs_and_a_new_lease_is_fresh(pool: BwrapPool) -> None:
    with pool.lease({"a.txt": "one"}) as sb:
        r1 = sb.run(["sh", "-c",
                     "cat a.txt; echo two > b.txt; mkdir -p d && echo 3 > d/c.txt; ln -s /etc/passwd l"])
        assert r1.ok and r1.stdout == "one"
        r2 = sb.run(["sh", "-c", "cat b.txt d/c.txt; readlink l"])
        assert r2.stdout == "two\n3\n/etc/passwd\n"
        assert sb.read_files() == {"a.txt": "one", "b.txt": "two\n", "d/c.txt": "3\n"}
        assert sb.read_files(["l", "missing", "d/c.txt"]) == {"d/c.txt": "3\n"}  # symlinks are not read
        lease_dir = sb.dir
    assert not lease_dir.exists()
    with pool.lease() as sb2:
        assert sb2.run(["sh", "-c", "ls -A"]).stdout == ""
        assert sb2.run(["sh", "-c", "ls -A /tmp"]).stdout == ""


def test_a_lease_keeps_the_modes_its_jobs_set(pool: BwrapPool) -> None:
    """chmod in one job is what the next job and the lease's reader see (a terminal task's permissions are
    part of its final state)."""
    with pool.lease({"a.sh": "echo hi\n", "key": "k"}) as sb:
        assert sb.run(["sh", "-c", "chmod 700 a.sh && chmod 640 key && mkdir -m 750 d"]).exit_code == 0
        r = sb.run(["sh", "-c", "stat -c '%n %a' a.sh key d && ./a.sh"])
        assert r.stdout == "a.sh 700\nkey 640\nd 750\nhi\n", r.stdout + r.stderr


def test_make_in_the_next_job_sees_what_changed(pool: BwrapPool) -> None:
    """A build in one job and an edit in the next: make rebuilds what the edit touched, and only that."""
    makefile = "out.txt: in.txt\n\tcp in.txt out.txt\n\techo built\n"
    with pool.lease({"Makefile": makefile, "in.txt": "one\n"}) as sb:
        assert "built" in sb.run(["make"]).stdout
        assert "up to date" in sb.run(["make"]).stdout
        sb.write_files({"in.txt": "two\n"})
        assert "built" in sb.run(["make"]).stdout
        assert sb.read_files(["out.txt"]) == {"out.txt": "two\n"}


def test_host_never_follows_a_planted_symlink(pool: BwrapPool, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("host data")
    with pool.lease() as sb:
        sb.run(["sh", "-c", f"ln -s {tmp_path} dir; ln -s {victim} file"])
        with pytest.raises(ValueError):
            sb.write_files({"dir/victim.txt": "overwritten"})
        sb.write_files({"file": "replaced link"})
        assert victim.read_text() == "host data"
        assert sb.read_files(["file"]) == {"file": "replaced link"}


def test_files_beyond_the_workspace_limit_are_a_file_limit(pool: BwrapPool) -> None:
    small = ExecLimits(workspace_mb=2, memory_mb=64)
    with pool.lease({"big.bin": b"x" * (3 * 2**20), "keep.txt": "k"}) as sb:
        r = sb.run(["python", "-c", "print('never')"], limits=small)
        assert r.status is ExecStatus.file_limit and r.stdout == "" and "does not fit" in (r.error or "")
        assert r.attempts == 1
        assert sb.read_files(["keep.txt"]) == {"keep.txt": "k"}
        assert sb.run(["python", "-c", "import os; print(os.path.getsize('big.bin'))"]).stdout == "3145728\n"


def test_a_deep_and_wide_workspace_is_the_programs_not_an_infra_fault(pool: BwrapPool) -> None:
    code = ("import os\nfor root in ('/workspace', '/tmp'):\n    os.chdir(root)\n    for i in range(1500):\n"
            "        os.mkdir(f'w{i}')\n    for _ in range(2500):\n        os.mkdir('d')\n        "
            "os.chdir('d')\n"
            "    open('deepest', 'w').write('x')\nprint('built')")
    with pool.lease({"keep.txt": "k"}) as sb:
        r = sb.run(["python", "-c", code], limits=ExecLimits(timeout_s=60))
        assert r.status is ExecStatus.ok and r.attempts == 1 and r.stdout == "built\n", r
        assert sb.read_files(["keep.txt"]) == {"keep.txt": "k"}
        again = sb.run(["sh", "-c", "ls | wc -l; cat keep.txt"])
        assert again.ok and again.stdout.split() == ["1502", "k"], again  # w0..w1499, d, keep.txt
    assert pool.run(["python", "-c", "print('next')"]).stdout == "next\n"


def test_run_reads_back_files_and_feeds_stdin(pool: BwrapPool) -> None:
    r = pool.run(["python", "-c", "import sys\nopen('out.txt', 'w').write(sys.stdin.read().upper())"],
                 stdin="hello", read=["out.txt"])
    assert r.ok and r.files == {"out.txt": "HELLO"}


def test_large_stdin_is_fed_while_output_drains(pool: BwrapPool) -> None:
    data = "x" * (3 * 2**20)
    r = pool.run(["python", "-c", "import sys\nd = sys.stdin.read()\nprint(len(d))"], stdin=data)
    assert r.ok and r.stdout == f"{len(data)}\n"


def test_mounts_are_read_only_and_private_to_the_lease(pool: BwrapPool, tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_hidden.py").write_text("def test_x():\n    assert True\n")
    with pool.lease({"sol.py": "x = 1"}, mounts={"/harness": hidden, "/opt/extra": {"k.txt": "v"}}) as sb:
        r = sb.run(["sh", "-c", "cat /opt/extra/k.txt; ls /harness; echo x > /harness/evil || echo refused"])
        assert r.stdout == "vtest_hidden.py\nrefused\n"
        r = sb.run(["sh", "-c", "ls -A /.rlvr; grep -c /.rlvr /proc/self/mountinfo"])
        assert r.stdout == "0\n"  # the leases were attached for the binds and unmounted again
        r = sb.run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "/harness"])
        assert r.ok and "1 passed" in r.stdout
    assert pool.run(["sh", "-c", "ls /harness /opt/extra 2>&1 || true"]).stdout.count("No such file") == 2


@pytest.mark.parametrize("target", ["relative", "/workspace/x", "/tmp", "/usr/lib/x", "/a/../etc", "/"])
def test_mount_targets_are_validated(pool: BwrapPool, target: str) -> None:
    with pytest.raises(ValueError), pool.lease(mounts={target: {"f": "x"}}):
        pass


def test_scratch_directories_are_fresh_for_every_run_and_read_back_by_absolute_path(pool: BwrapPool) -> None:
    with pool.lease({"a.txt": "x"}, mounts={"/tests": {"t.sh": "echo t"}}, scratch=["/logs"]) as sb:
        r = sb.run(["sh", "-c", "ls -A /logs; mkdir /logs/verifier && echo 0.5 > /logs/verifier/reward.txt "
                    "&& echo y > a.txt && stat -c %u /logs"],
                   read=["/logs/verifier/reward.txt", "/logs/missing", "a.txt", "/logs/../etc/passwd"])
        assert r.ok and r.stdout == "65534\n", (r.stdout, r.stderr)  # empty, and the job's own
        assert r.files == {"/logs/verifier/reward.txt": "0.5\n", "a.txt": "y\n"}
        assert sb.read_bytes("/logs/verifier/reward.txt") == b"0.5\n"
        r = sb.run(["sh", "-c", "ls -A /logs"], read=["/logs/verifier/reward.txt"])
        assert r.ok and r.stdout == "" and r.files == {}  # nothing of the run before: fresh, not kept
    assert "No such file" in pool.run(["sh", "-c", "ls /logs 2>&1 || true"]).stdout  # only where asked for


@pytest.mark.parametrize("scratch, mounts", [
    (["relative"], {}), (["/tmp/x"], {}), (["/workspace"], {}), (["/logs", "/logs/verifier"], {}),
    (["/tests/out"], {"/tests": {}}), (["/tests"], {"/tests": {}})])
def test_scratch_targets_are_validated(pool: BwrapPool, scratch: list[str], mounts: dict) -> None:
    with pytest.raises(ValueError), pool.lease(mounts=mounts, scratch=scratch):
        pass


def test_workers_started_on_a_short_lived_thread_outlive_it() -> None:
    """bubblewrap's --die-with-parent follows the forking thread: a pool (an image's, a requirements venv's)
    started on a rollout's tool thread must keep its workers when that thread ends."""
    import threading

    made: list[BwrapPool] = []
    thread = threading.Thread(target=lambda: made.append(BwrapPool(workers=2, spares=0, warm=())))
    thread.start()
    thread.join()
    (p,) = made
    try:
        time.sleep(0.3)  # the parent-death signal, were it to come, comes at once
        assert all(w.alive() for w in list(p._idle.queue))
        assert [p.run(["true"]).ok for _ in range(4)] == [True] * 4 and p.restarts == 0
    finally:
        p.close()


def test_result_channel_on_fd3(pool: BwrapPool) -> None:
    r = pool.run(["python", "-c", "import os\nos.write(3, b'{\"score\": 1}')\nprint('out')"], channel=True)
    assert r.ok and r.channel == '{"score": 1}' and r.stdout == "out\n"
    r = pool.run(["python", "-c", "import os\nos.write(3, b'x')"])
    assert r.status is ExecStatus.exit_nonzero  # no fd 3 unless asked for


def test_python_modes_match_a_fresh_interpreter(pool: BwrapPool) -> None:
    files = {"pkg/__init__.py": "", "pkg/__main__.py": "import sys\nprint('main', sys.argv[1:])",
             "script.py": "import sys\nprint(__name__, sys.argv)\nraise SystemExit('bad')"}
    with pool.lease(files) as sb:
        assert sb.run(["python", "-m", "pkg", "a"]).stdout == "main ['a']\n"
        r = sb.run(["python", "script.py", "x"])
        assert r.status is ExecStatus.exit_nonzero and r.exit_code == 1
        assert r.stdout == "__main__ ['script.py', 'x']\n" and r.stderr == "bad\n"
        r = sb.run(["python", "-c", "import sys; print(sys.argv, __name__)", "q"])
        assert r.stdout == "['-c', 'q'] __main__\n"
        r = sb.run(["python", "-c", "1/0"])
        assert r.exit_code == 1 and "ZeroDivisionError" in r.stderr
        r = sb.run(["python", "-I", "-c", "import sys; print(sys.flags.isolated)"])
        assert r.stdout == "1\n"  # unusual flags fall back to a fresh interpreter
        assert sb.run(["python", "-c", "import numpy, pytest; print('ok')"]).stdout == "ok\n"


def test_pytest_runs_warm(pool: BwrapPool) -> None:
    files = {"test_a.py": "def test_a():\n    assert 1\n\ndef test_b():\n    assert 0\n"}
    r = pool.run(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"], files=files)
    assert r.status is ExecStatus.exit_nonzero and r.exit_code == 1 and "1 failed, 1 passed" in r.stdout


def test_missing_program_is_the_programs_failure(pool: BwrapPool) -> None:
    r = pool.run(["no-such-program-xyz"])
    assert r.status is ExecStatus.exit_nonzero and r.exit_code == 127 and "cannot execute" in r.stderr


def test_same_inputs_give_the_same_environment(pool: BwrapPool) -> None:
    code = ("import os, sys, time, random\nprint(hash('abc'), os.getcwd(), os.getuid(), time.tzname, "
            "sorted(os.environ.items()), sys.path, os.listdir('.'))")
    runs = {pool.run(["python", "-c", code], files={"f.txt": "1"}).stdout for _ in range(4)}
    runs |= {pool.run(["python", "-c", code], files={"f.txt": "1"}).stdout}
    assert len(runs) == 1 and "/workspace" in runs.pop()


def test_seccomp_refuses_user_namespaces_and_rare_kernel_surface(pool: BwrapPool) -> None:
    """Without the filter an unprivileged program could make a user namespace and be root (mounts, netfilter)
    inside it; threads, subprocesses and forks, which the C library may start through clone3, keep working."""
    code = ("import ctypes, os, subprocess, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "def errno(rc):\n    return ctypes.get_errno() if rc == -1 else 0\n"
            "print(errno(libc.unshare(0x10000000)), errno(libc.unshare(0x40000000)), "
            "errno(libc.syscall(425, 1, 0)), errno(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)))\n"
            "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
            "print(subprocess.run(['sh', '-c', 'echo sub & wait'], capture_output=True, "
            "text=True).stdout.strip())\n"
            "print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])")
    r = pool.run(["python", "-c", code])
    assert r.ok and r.stdout.split("\n")[:4] == ["1 1 1 1", "thread", "sub", "2"], (r.stdout, r.stderr[-300:])
    shell = pool.run(["sh", "-c", "unshare -U -r id"])
    assert shell.status is ExecStatus.exit_nonzero and "uid=0" not in shell.stdout


def test_system_v_ipc_of_one_job_is_gone_for_the_next(pool: BwrapPool) -> None:
    """Shared memory, semaphores and message queues outlive their creator: every job gets its own IPC
    namespace."""
    code = ("import ctypes\nlibc = ctypes.CDLL(None)\nleft = "
            "open('/proc/sysvipc/shm').read().count('\\n') - 1\n"
            "made = libc.shmget(4242, 4096, 0o3666)\nprint(left, made >= 0)")  # IPC_CREAT | IPC_EXCL
    outs = [pool.run(["python", "-c", code]).stdout for _ in range(6)]  # several jobs on every worker
    assert outs == ["0 True\n"] * 6


def test_a_port_the_last_job_used_is_free_for_the_next(pool: BwrapPool) -> None:
    """A closed TCP connection lingers in TIME_WAIT; every job gets its own network namespace, so the next job
    neither sees it nor finds the port taken."""
    code = ("import socket\nleft = len(open('/proc/net/tcp').readlines()) - 1\n"
            "s = socket.socket()\ns.bind(('127.0.0.1', 5555))\ns.listen()\n"
            "c = socket.create_connection(('127.0.0.1', 5555))\nx, _ = s.accept()\nx.close()\nc.close()\n"
            "s.close()\nprint(left, 'bound')")  # the server side closes first: its port goes to TIME_WAIT
    outs = [pool.run(["python", "-c", code]) for _ in range(4)]
    assert [r.stdout for r in outs] == ["0 bound\n"] * 4, [r.stderr[-200:] for r in outs]


def _imports_pytest_code() -> str:
    return "import sys\nprint(any(m.startswith('_py' + 'test') for m in sys.modules))"  # never names it


def test_jobs_go_to_the_lean_or_the_warm_template(pool: BwrapPool) -> None:
    assert not pool.wants_warm(["python", "-c", "print(1)"]) and not pool.wants_warm(["sh", "-c", "pytest"])
    assert not pool.wants_warm(["python", "-I", "-c", "import pytest"])  # exec'd: a fresh interpreter anyway
    assert pool.wants_warm(["python", "-m", "pytest", "-q"]) and pool.wants_warm(["python", "judge/run.py"])
    assert pool.wants_warm(["python", "-c", "import pytest"])
    lean = pool.run(["python", "-c", _imports_pytest_code()])
    warm = pool.run(["python", "probe.py"], files={"probe.py": _imports_pytest_code()})
    assert (lean.stdout, warm.stdout) == ("False\n", "True\n")


def _lean_zygotes(worker_pid: int) -> list[int]:
    """Host PIDs of the lean zygotes under one worker's bubblewrap process: the child of the warm zygote (the
    top one) that shares its PID namespace (the chains it forks are each PID 1 of a fresh one)."""
    def is_zygote(pid: int) -> bool:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:2] == [b"/opt/rlvr/zygote.py"]

    stack, warm = [worker_pid], []
    while stack:
        pid = stack.pop()
        if is_zygote(pid):
            warm.append(pid)
            continue
        stack += child_pids(pid)
    return [kid for z in warm for kid in child_pids(z)
            if is_zygote(kid) and os.readlink(f"/proc/{kid}/ns/pid") == os.readlink(f"/proc/{z}/ns/pid")]


def test_a_dead_lean_template_takes_its_worker_down_and_is_replaced(pool: BwrapPool) -> None:
    pool.run(["python", "-c", "pass"])
    workers = list(pool._idle.queue)
    lean = [z for w in workers for z in _lean_zygotes(w.proc.pid)]
    assert len(lean) == len(workers)  # one lean template per worker
    for z in lean:
        os.kill(z, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(w.alive() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.02)  # the warm zygote notices, and the worker ends
    assert not any(w.alive() for w in workers)
    for _ in workers:  # each dead worker is replaced as it comes up, at no cost of an attempt
        r = pool.run(["python", "-c", "print('served')"])
        assert r.ok and r.attempts == 1 and r.stdout == "served\n"
    assert all(w.alive() for w in pool._idle.queue)


def _prepared_job_processes(worker_pid: int) -> list[int]:
    """Host PIDs of the job processes (D) waiting under one worker: zygote forks that already dropped to the
    sandbox user."""
    found, stack = [], [worker_pid]
    while stack:
        pid = stack.pop()
        try:
            kids = child_pids(pid)
            status = Path(f"/proc/{pid}/status").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
        if b"/opt/rlvr/zygote.py" in cmd and uid == "65534":
            found.append(pid)
        stack += kids
    return found


def test_a_prepared_job_process_that_dies_is_replaced_unseen(pool: BwrapPool) -> None:
    pool.run(["python", "-c", "pass"])
    time.sleep(0.3)  # every template has its chains prepared
    waiting = [d for pid in pool.worker_pids() for d in _prepared_job_processes(pid)]
    assert waiting  # each template keeps chains ahead
    restarts = pool.restarts
    for d in waiting:
        os.kill(d, signal.SIGKILL)
    for script in (False, True) * 4:  # lean and warm templates alike
        r = (pool.run(["python", "s.py"], files={"s.py": "print('served')"}) if script
             else pool.run(["python", "-c", "print('served')"]))
        assert r.ok and r.attempts == 1 and r.stdout == "served\n", r
    assert pool.restarts == restarts  # replaced inside the worker: no worker was lost


def test_the_program_holds_no_descriptor_of_its_supervisors(pool: BwrapPool) -> None:
    code = ("import os\ndef is_open(fd):\n    try:\n        return bool(os.fstat(fd))\n    except OSError:\n"
            "        return False\nprint([fd for fd in range(4096) if is_open(fd)])")
    assert pool.run(["python", "-c", code]).stdout == "[0, 1, 2]\n"
    assert pool.run(["python", "-c", code], channel=True).stdout == "[0, 1, 2, 3]\n"
    assert pool.run(["python", "p.py"], files={"p.py": code}).stdout == "[0, 1, 2]\n"
    shell = pool.run(["sh", "-c", "ls /proc/$$/fd"])
    assert shell.stdout.split() == ["0", "1", "2"]


def test_the_program_is_pid_2_under_an_init_that_only_holds_its_namespace(pool: BwrapPool) -> None:
    code = ("import os\nprint(os.getpid(), os.getppid(), sorted(int(p) for p in os.listdir('/proc') if "
            "p.isdigit()))\n"
            "print(open('/proc/1/status').read().split('State:')[1].split()[0])")
    r = pool.run(["python", "-c", code])
    assert r.ok and r.stdout.splitlines() == ["2 0 [1, 2]", "S"], r


def test_the_init_that_shares_the_zygotes_memory_is_closed_to_the_program(pool: BwrapPool) -> None:
    """PID 1 of a job shares the zygote's address space and descriptor table (wire.spawn_waiter): the
    program must not read either, nor signal it."""
    code = ("import os, signal\nfor path in ('/proc/1/mem', '/proc/1/maps', '/proc/1/environ', "
            "'/proc/1/stack'):\n"
            "    try:\n        open(path, 'rb').read(64)\n        print('READ', path)\n    except OSError:\n "
            "       pass\n"
            "try:\n    print('FDS', os.listdir('/proc/1/fd'))\nexcept OSError:\n    pass\n"
            "for sig in (signal.SIGKILL, signal.SIGTERM):\n    try:\n        os.kill(1, sig)\n        "
            "print('SIGNALLED')\n"
            "    except OSError:\n        pass\nprint('done')")
    r = pool.run(["python", "-c", code])
    assert r.ok and r.stdout == "done\n", r
    assert pool.run(["python", "-c", "print('next')"]).stdout == "next\n"


def test_worker_killed_while_idle_is_replaced_without_costing_an_attempt(pool: BwrapPool) -> None:
    for pid in pool.worker_pids():
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    r = pool.run(["python", "-c", "print('served')"])
    assert r.ok and r.attempts == 1


def test_worker_killed_mid_job_is_retried_once(pool: BwrapPool) -> None:
    before = pool.restarts
    killer = _kill_worker_soon(pool, 0.4)
    r = pool.run(["python", "-c", "import time\ntime.sleep(1.0)\nprint('finished')"])
    killer.join()
    assert r.ok and r.attempts == 2 and r.stdout == "finished\n"
    assert pool.restarts > before


def _kill_worker_soon(pool: BwrapPool, delay: float):
    import threading

    def kill() -> None:
        deadline = time.monotonic() + 30
        while not pool._busy and time.monotonic() < deadline:  # wait for the job to start
            time.sleep(0.01)
        time.sleep(delay)
        for w in list(pool._busy):
            os.kill(w.proc.pid, signal.SIGKILL)

    t = threading.Thread(target=kill)
    t.start()
    return t


def test_infra_error_after_two_lost_workers(pool: BwrapPool) -> None:
    import threading

    stop = threading.Event()

    def keep_killing() -> None:
        while not stop.is_set():
            for w in list(pool._busy):
                try:
                    os.kill(w.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    t = threading.Thread(target=keep_killing)
    t.start()
    try:
        r = pool.run(["python", "-c", "import time\ntime.sleep(2)"], limits=ExecLimits(timeout_s=5))
    finally:
        stop.set()
        t.join()
    assert r.status is ExecStatus.infra_error and r.attempts == 2 and "lost" in (r.error or "")
    assert pool.run(["python", "-c", "print(2)"]).stdout == "2\n"


def test_concurrent_leases_never_see_each_other(pool: BwrapPool) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def job(i: int) -> str:
        with pool.lease({f"mine{i}.txt": str(i)}) as sb:
            return sb.run(["sh", "-c", "ls; ls /.rlvr 2>&1 | head -1"]).stdout

    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(job, range(8)))
    for i, out in enumerate(outs):
        assert out.split() == [f"mine{i}.txt"]  # its own file only; the control dir is unmounted


def test_closed_pool_leaves_nothing_behind(tmp_path: Path) -> None:
    from rlvr.sandbox.bench import host_state

    p = BwrapPool(workers=1, spares=1)
    base, workers = p.base, p.worker_pids()
    for _ in range(10):
        p.run(["python", "-c", "import os\nif os.fork() == 0:\n    import time; time.sleep(30)"],
              limits=TIGHT)
    assert host_state(p.pool_id)["sandbox_processes"] >= 3
    p.close()
    p.close()  # idempotent
    assert host_state(p.pool_id) == {"sandbox_processes": 0, "mounts": 0, "cgroups": 0, "temp_dirs": 0}
    assert not base.exists() and not any(Path(f"/proc/{pid}").exists() for pid in workers)
    with pytest.raises(RuntimeError):
        p.run(["true"])
    assert not base.exists()  # using a closed pool brings nothing back


def test_an_interpreter_under_tmp_is_relocated_not_hidden(tmp_path: Path) -> None:
    """A checkout (and its venv) under /tmp, as CI may have it: the sandbox's own /tmp must not hide it."""
    import subprocess
    import sys

    from rlvr.sandbox.container import RELOCATED_PREFIX, inner_interpreter

    assert inner_interpreter("/usr/bin/python3") == ("/usr/bin/python3", None)
    assert inner_interpreter("/tmp/ci/.venv/bin/python") == (f"{RELOCATED_PREFIX}/bin/python",
                                                             ("/tmp/ci/.venv", RELOCATED_PREFIX))
    venv = Path("/tmp") / f"rlvr-venv-test-{os.getpid()}"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        (next(venv.glob("lib/python*/site-packages")) / "marker_mod.py").write_text("HERE = 1\n")
        with BwrapPool(python=str(venv / "bin" / "python"), workers=1, spares=0, warm=()) as p:
            res = p.run(["python", "-c", "import sys, marker_mod; print(sys.prefix)"])
            assert res.ok, res.stderr
            assert res.stdout.strip() == RELOCATED_PREFIX
            res = p.run(["python", "-I", "-c", "print(42)"])  # a fresh interpreter, not the warm one
            assert res.ok and res.stdout.strip() == "42", res.stderr
    finally:
        import shutil

        shutil.rmtree(venv, ignore_errors=True)


def test_an_interpreter_reached_through_a_linked_folder_runs(tmp_path: Path) -> None:
    """A venv under a linked folder (a clone's .rlvr-cache links to a cache outside the clone): the link is
    not in the sandbox, so the venv must be bound and run at its real path, and find its site-packages."""
    import shutil
    import subprocess
    import sys

    real = Path("/var/tmp") / f"rlvr-real-{os.getpid()}"
    link = Path("/var/tmp") / f"rlvr-link-{os.getpid()}"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(real / "venv")], check=True,
                       timeout=120)
        (next((real / "venv").glob("lib/python*/site-packages")) / "marker_mod.py").write_text("HERE = 1\n")
        link.symlink_to(real)
        with BwrapPool(python=str(link / "venv" / "bin" / "python"), workers=1, spares=0, warm=()) as p:
            res = p.run(["python", "-c", "import sys, marker_mod; print(sys.prefix)"])
            assert res.ok, res.stderr
            assert res.stdout.strip() == str(real / "venv")
    finally:
        link.unlink(missing_ok=True)
        shutil.rmtree(real, ignore_errors=True)
