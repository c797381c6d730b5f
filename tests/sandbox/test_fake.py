"""The in-process double behaves like a pool: leases persist files, answers come from the handler."""
from __future__ import annotations

import pytest

from rlvr.sandbox import Sandbox, SandboxPool
from rlvr.sandbox.fake import FakeCall, FakePool
from rlvr.sandbox.result import ExecResult, ExecStatus


def test_protocols_and_answers() -> None:
    def handler(call: FakeCall):
        if call.argv[0] == "fail":
            return 3
        if call.argv[0] == "timeout":
            return ExecResult(status=ExecStatus.timeout)
        call.files["out.txt"] = call.stdin.upper()
        return "done\n"

    pool = FakePool(handler)
    assert isinstance(pool, SandboxPool)
    with pool.lease({"a.txt": "1"}) as sb:
        assert isinstance(sb, Sandbox)
        r = sb.run(["x"], stdin="hi", read=["out.txt", "missing"])
        assert r.ok and r.stdout == "done\n" and r.files == {"out.txt": "HI"}
        assert sb.read_files() == {"a.txt": "1", "out.txt": "HI"}
        assert sb.run(["fail"]).status is ExecStatus.exit_nonzero
        assert sb.run(["timeout"]).status is ExecStatus.timeout
        assert pool.open_leases == 1
    assert pool.open_leases == 0 and pool.leases == 1 and len(pool.calls) == 3
    with pool.lease() as sb2:
        assert sb2.read_files() == {}


def test_mounts_are_visible_to_the_handler_and_paths_checked() -> None:
    seen = {}
    pool = FakePool(lambda call: seen.update(call.mounts) or 0)
    pool.run(["x"], mounts={"/harness": {"t.py": "x"}})
    assert seen == {"/harness": {"t.py": b"x"}}
    with pytest.raises(ValueError):
        pool.run(["x"], files={"../evil": "x"})
    with pytest.raises(ValueError):
        pool.run([])


def test_lease_tears_down_on_error() -> None:
    pool = FakePool()
    with pytest.raises(RuntimeError), pool.lease():
        raise RuntimeError("boom")
    assert pool.open_leases == 0
    with pool:
        pass
    assert pool.closed


def test_scratch_is_fresh_for_every_run_and_a_directory_mounts(tmp_path) -> None:
    (tmp_path / "t.sh").write_bytes(b"\x00bin")

    def handler(call: FakeCall):
        seen = sorted(call.scratch["/logs"])
        call.scratch["/logs"]["verifier/reward.txt"] = b"1"
        return ",".join(seen)

    with FakePool(handler).lease(mounts={"/tests": tmp_path}, scratch=["/logs"]) as sb:
        r = sb.run(["x"], read=["/logs/verifier/reward.txt", "/logs/none", "a"])
        assert r.stdout == "" and r.files == {"/logs/verifier/reward.txt": "1"}
        assert sb.run(["x"]).stdout == ""  # the first run's file is gone
        assert sb.mounts == {"/tests": {"t.sh": b"\x00bin"}}
