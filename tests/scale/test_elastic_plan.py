"""The sandbox fleet's decisions (rlvr.scale.elastic.plan), rule by rule, without Ray: nodes that join, leave
and drain, scale-up (an idle node first, else the autoscaler) and scale-down, within `[cluster]`'s bounds."""
from __future__ import annotations

import pytest

from rlvr.config import ClusterConfig, load_config
from rlvr.errors import UserError
from rlvr.scale.elastic import Seen, plan

NOW = 1_000_000.0


def look(workers, alive, draining=None, *, seen=None, released=(), starting=(), waiting_s=0.0, asked=0,
         **cfg):
    known = {w.node for w in workers} if seen is None else set(seen)
    return plan(workers, alive, draining or {}, seen=known, released=set(released), starting=list(starting),
                waiting_s=waiting_s, asked=asked, now=NOW, cfg=ClusterConfig(**cfg))


def test_a_node_that_joins_gets_a_worker_and_a_known_one_does_not() -> None:
    p = look([Seen("a", in_flight=1)], ["a", "b", "c"], seen={"a", "c"})
    assert p.start == ["b"]  # c was seen before (released): only a scale-up reuses it
    assert ("joined", "b") in p.events
    assert p.want == 2


def test_joiners_stop_at_the_max() -> None:
    p = look([Seen("a")], ["a", "b", "c", "d"], sandbox_workers_max=2)
    assert p.start == ["b"] and p.want == 2


def test_a_lost_node_is_reported_and_not_counted() -> None:
    p = look([Seen("a", leases=3), Seen("b")], ["b"])
    assert p.lost == ["a"] and not p.start and ("lost", "a") in p.events
    assert p.want == 1


def test_a_draining_worker_stops_when_empty_and_is_marked_drained() -> None:
    p = look([Seen("a"), Seen("b")], ["a", "b"], {"a": NOW + 60})
    assert p.stop == ["a"] and p.drained == ["a"] and not p.hand_back


def test_a_draining_worker_keeps_its_workspaces_until_the_hand_back_time() -> None:
    early = look([Seen("a", leases=2), Seen("b")], ["a", "b"], {"a": NOW + 60}, handback_s=10)
    assert not early.stop and not early.hand_back  # in-flight work may finish by itself
    late = look([Seen("a", leases=2), Seen("b")], ["a", "b"], {"a": NOW + 9}, handback_s=10)
    assert late.hand_back == ["a"] and not late.stop  # it stops once its last job has ended
    busy = look([Seen("a", in_flight=1), Seen("b")], ["a", "b"], {"a": NOW + 60})
    assert not busy.stop and not busy.drained


def test_a_draining_node_never_gets_a_worker() -> None:
    p = look([Seen("a")], ["a", "b"], {"b": NOW + 60}, seen={"a"})
    assert not p.start
    up = look([Seen("a", in_flight=4)], ["a", "b"], {"b": NOW + 60}, seen={"a", "b"}, released={"b"},
              waiting_s=9)
    assert "b" not in up.start


def test_waiting_jobs_reuse_an_idle_node_before_asking_the_autoscaler() -> None:
    p = look([Seen("a", in_flight=4)], ["a", "b"], seen={"a", "b"}, released={"b"}, waiting_s=6,
             scale_up_wait_s=5)
    assert p.start == ["b"] and ("up", "b") in p.events and p.want == 2


def test_waiting_jobs_ask_the_autoscaler_for_one_more_worker_and_keep_asking() -> None:
    p = look([Seen("a", in_flight=4)], ["a"], waiting_s=6, scale_up_wait_s=5)
    assert not p.start and p.want == 2 and ("asked", "2 workers") in p.events
    again = look([Seen("a", in_flight=4)], ["a"], waiting_s=8, asked=2, scale_up_wait_s=5)
    assert again.want == 2 and not any(e[0] == "asked" for e in again.events)  # asked once, still standing
    served = look([Seen("a", in_flight=1)], ["a"], waiting_s=0, asked=2)
    assert served.want == 1  # nobody waits any more: the extra request is withdrawn


def test_a_short_wait_asks_for_nothing() -> None:
    p = look([Seen("a", in_flight=4)], ["a"], waiting_s=1, scale_up_wait_s=5)
    assert p.want == 1 and not p.start


def test_no_scale_up_past_the_max_or_while_a_worker_starts() -> None:
    capped = look([Seen("a", in_flight=4)], ["a"], waiting_s=9, sandbox_workers_max=1)
    assert capped.want == 1
    starting = look([Seen("a", in_flight=4)], ["a", "b"], seen={"a", "b"}, starting=["b"], waiting_s=9)
    assert not starting.start and starting.want == 2


def test_an_idle_worker_stops_above_the_min_only() -> None:
    idle = [Seen("a", idle_s=200), Seen("b", idle_s=500), Seen("c", in_flight=1)]
    p = look(idle, ["a", "b", "c"], scale_down_idle_s=120)
    assert p.stop == ["b"] and ("down", "b") in p.events and p.want == 2  # the idlest, one per look
    floor = look([Seen("a", idle_s=900)], ["a"], scale_down_idle_s=120)
    assert not floor.stop
    waiting = look(idle, ["a", "b", "c"], waiting_s=1, scale_down_idle_s=120)
    assert not waiting.stop  # someone waits: no scale-down
    at_min = look(idle[:2], ["a", "b"], scale_down_idle_s=120, sandbox_workers_min=2)
    assert not at_min.stop


def test_the_min_is_always_asked_for() -> None:
    p = look([], ["a"], seen={"a"}, sandbox_workers_min=3)
    assert p.want == 3


def test_bounds_that_cannot_hold_are_one_line(tmp_path) -> None:
    with pytest.raises(UserError, match="sandbox_workers_max") as exc:
        ClusterConfig(sandbox_workers_min=3, sandbox_workers_max=2)
    assert "\n" not in str(exc.value)
    bad = tmp_path / "run.toml"
    bad.write_text("[cluster]\nsandbox_workers_min = 0\n")
    with pytest.raises(UserError, match="sandbox_workers_min"):
        load_config(bad)
