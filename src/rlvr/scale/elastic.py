"""How the sandbox fleet follows the cluster: what to do when nodes join, leave or drain, and when to grow or
shrink. The decision is a pure function (`plan`) of what the fleet sees, so every rule is tested without Ray;
the fleet (rlvr.scale.ray_pool) looks every `[cluster] watch_interval_s` and carries the plan out.

The rules, in order:
- **Lost**: a worker whose node is no longer alive is gone; its jobs were retried elsewhere and its
  workspaces' episodes rebuild theirs elsewhere (rlvr.envs.env replays the changes they made): infra faults,
  never the policy's.
- **Draining** (Ray's drain: a preemption notice, `rlvr node` on SIGTERM, an autoscaler taking the node back):
  nothing new goes there. A worker with no job in flight and no open workspace stops at once; otherwise, once
  the node's deadline is `handback_s` away, its open workspaces are handed back (their episodes go on
  elsewhere), and it stops when its last job ends. The node is then marked drained so its agent may stop it.
- **Joined**: a node never seen before gets a worker at once (up to `sandbox_workers_max`): a node added by
  hand and one an autoscaler provisioned are used alike.
- **Up**: a job that waited `scale_up_wait_s` for a slot asks for one more worker: on an alive node the fleet
  left earlier if there is one, else from the autoscaler (`want` one more bundle; Ray's `request_resources`).
- **Down**: a worker idle for `scale_down_idle_s`, while none waits and more than `sandbox_workers_min` run,
  stops (one per look); its node is released, and the autoscaler may take it back.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rlvr.config import ClusterConfig


@dataclass(frozen=True)
class Seen:
    """One worker as the fleet sees it at a look."""

    node: str
    in_flight: int = 0
    """Jobs running on it."""
    leases: int = 0
    """Workspaces open on it."""
    idle_s: float = 0.0
    """Seconds since it last had a job or a workspace (0 while it has one)."""


@dataclass
class Plan:
    """What to do at one look (node ids)."""

    start: list[str] = field(default_factory=list)
    """Nodes that get a worker."""
    stop: list[str] = field(default_factory=list)
    """Workers to stop: drained, or idle."""
    hand_back: list[str] = field(default_factory=list)
    """Draining workers whose open workspaces are handed back now."""
    lost: list[str] = field(default_factory=list)
    """Workers whose node is gone."""
    drained: list[str] = field(default_factory=list)
    """Draining nodes the fleet has left for good (mark them drained)."""
    want: int = 0
    """Sandbox workers the fleet asks the autoscaler to have room for, in all."""
    events: list[tuple[str, str]] = field(default_factory=list)
    """(what, node) of each change, for the log: joined, lost, draining, handed back, drained, up, down,
    asked."""


def plan(workers: Sequence[Seen], alive: Sequence[str], draining: Mapping[str, float], *, seen: set[str],
         released: set[str], starting: Sequence[str], waiting_s: float, asked: int, now: float,
         cfg: ClusterConfig) -> Plan:
    """The plan of one look (see the module docstring).

    `alive`: nodes that can hold a worker; `draining`: node -> Unix deadline; `seen`: every node the fleet has
    ever considered; `released`: alive nodes it left (idle scale-down, or it could not place a worker there);
    `starting`: nodes whose worker is starting; `waiting_s`: how long the longest-waiting job has waited for a
    slot (0: none waits); `asked`: the workers asked of the autoscaler so far; `now`: Unix time."""
    out = Plan()
    top = cfg.sandbox_workers_max if cfg.sandbox_workers_max is not None else math.inf
    live = set(alive)
    active: list[Seen] = []
    for w in workers:
        if w.node not in live:
            out.lost.append(w.node)
            out.events.append(("lost", w.node))
        elif w.node in draining:
            if w.in_flight == 0 and w.leases == 0:
                out.stop.append(w.node)
                out.drained.append(w.node)
                out.events.append(("drained", w.node))
            elif w.leases and now >= draining[w.node] - cfg.handback_s:
                out.hand_back.append(w.node)
                out.events.append(("handed back", w.node))
        else:
            active.append(w)
    held = {w.node for w in workers} | set(starting)
    free = [n for n in alive if n not in held and n not in draining]
    count = len(active) + len(starting)
    for node in free:
        if node not in seen and count < top:
            out.start.append(node)
            out.events.append(("joined", node))
            count += 1
    if waiting_s >= cfg.scale_up_wait_s and count < top and not starting:
        reuse = [n for n in free if n in released and n not in out.start]
        if reuse:
            out.start.append(reuse[0])
            out.events.append(("up", reuse[0]))
            count += 1
        elif asked <= count:
            out.want = count + 1
            out.events.append(("asked", f"{count + 1} workers"))
    elif waiting_s == 0 and len(active) > cfg.sandbox_workers_min:
        idle = [w for w in active if w.in_flight == 0 and w.leases == 0 and w.idle_s >= cfg.scale_down_idle_s]
        if idle:
            victim = max(idle, key=lambda w: w.idle_s)
            out.stop.append(victim.node)
            out.events.append(("down", victim.node))
            count -= 1
    if not out.want:  # keep asking while jobs still wait for what was asked; else ask for what runs
        out.want = asked if waiting_s > 0 and asked > count else count
    out.want = max(out.want, cfg.sandbox_workers_min)
    return out
