"""Agents from outside as the policy of an episode: each runs in its episode's sandbox and calls the gateway.

    rollouts = AgentRollouts(gateway, pool, scorer, AgentConfig(command="python $RLVR_AGENT_DIR/agent.py"))
    episodes = rollouts.run(tasks, k, step=0, seed=0)   # a run's: rlvr.run.build with `[agent] command`

A `Rollouts` driver (`rlvr.rollout.core.rollouts`), where the built-in env loop is otherwise (`rlvr eval
--agent`, and `[agent] command` in `rlvr train`): the same group ids, seeds and stats.

For each episode: a gateway session (its own key and budgets), a lease on the agents' isolated pool (running
on the agent's interpreter, `[agent] python`, mounted read-only like a requirements venv) holding the task's
workspace, the agent's files read-only at /rlvr/agent (`$RLVR_AGENT_DIR`), and at /rlvr/episode the prompt,
the key, the launcher (`rlvr.rollout.gateway.launch`) and a Unix socket served by the gateway for that key
alone. The job has no network but its loopback: the launcher forwards 127.0.0.1 to that socket. When the agent
exits (or a budget stops it: turns and tokens by the gateway, wall time by the job's timeout), the final
workspace, and its stdout as the answer, go to the run's Scorer. The agent's crash, hang or garbage is the
episode's (the policy's) fault and is scored like any episode; only a sandbox infrastructure fault masks it.
"""
from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.envs.tools import refuse_links_out
from rlvr.errors import UserError
from rlvr.rollout.core.rollouts import OnEpisode, Progress, RolloutStats, Sample, samples, verify_seed
from rlvr.rollout.episode import TOKEN_BUDGET, Episode
from rlvr.rollout.gateway.core import Gateway
from rlvr.rollout.gateway.presets import resolve
from rlvr.rollout.gateway.server import serve_unix
from rlvr.rollout.policy import SamplingParams
from rlvr.sandbox import tree
from rlvr.sandbox.base import environment_of
from rlvr.sandbox.result import ExecLimits, ExecStatus
from rlvr.tasks.spec import FinalState, Task

if TYPE_CHECKING:
    from rlvr.config import AgentConfig
    from rlvr.verify.scorer import Scorer

LAUNCHER = Path(__file__).with_name("launch.py")
AGENT_DIR = "/rlvr/agent"
EPISODE_DIR = "/rlvr/episode"
STDERR_KEPT = 4000
"""Characters of the agent's stderr kept in the episode's metadata (its tail)."""


def check_agent(cfg: AgentConfig) -> None:
    """Refuse an agent that cannot start, before any episode: one UserError naming the option and the fix (a
    preset's missing install included)."""
    cfg = resolve(cfg)
    if not cfg.command.strip():
        raise UserError("the agent command is empty", field="agent.command",
                        fix='e.g. --agent "python agent.py"')
    try:
        shlex.split(cfg.command)
    except ValueError as exc:
        raise UserError(f"the agent command does not parse as a shell command ({exc})", field="agent.command",
                        fix="balance its quotes") from None
    if not Path(cfg.dir).expanduser().is_dir():
        raise UserError("the agent directory does not exist", file=cfg.dir, field="agent.dir",
                        fix="give --agent-dir DIR holding the agent's files")
    # a venv directory: its bin/python
    if cfg.python is not None and not Path(agent_python(cfg) or "").is_file():
        raise UserError("the agent's interpreter does not exist", file=cfg.python, field="agent.python",
                        fix="give --agent-python PATH/bin/python of a venv with the agent's packages")


def agent_python(cfg: AgentConfig) -> str | None:
    """The interpreter the agents' pool runs: `[agent] python` (or a preset's), or a venv directory's
    bin/python."""
    cfg = resolve(cfg)
    if cfg.python is None:
        return None
    p = Path(cfg.python).expanduser()
    return str(p / "bin" / "python") if p.is_dir() else str(p)


def _readable(root: Path) -> None:
    """Make the staged copy of the agent's files readable by the sandbox's user (the copy keeps the host's
    modes, and a private 0700 directory would hide them); the mount stays read-only."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        path.chmod(0o755 if path.is_dir() or mode & 0o100 else 0o644)


class AgentRollouts:
    """Runs `k` episodes a task with the agent as the policy; `run` returns them, scored."""

    def __init__(self, gateway: Gateway, pool: Any, scorer: Scorer, cfg: AgentConfig, *, run_id: str = "",
                 max_turns: int | None = None, max_tokens: int | None = None,
                 on_episode: OnEpisode | None = None, progress: Progress | None = None) -> None:
        """`on_episode(episode)` and `progress(done, total)` are called as each episode ends (on its
        thread)."""
        from rlvr.sandbox.pool import BwrapPool

        if not isinstance(pool, BwrapPool):
            raise UserError("agents run in the isolated sandbox only", field="sandbox.isolation",
                            fix='set [sandbox] isolation = "bwrap"')
        cfg = resolve(cfg)
        check_agent(cfg)
        self.gateway, self.pool, self.scorer, self.cfg = gateway, pool, scorer, cfg
        self.run_id, self.max_turns, self.max_tokens, self.on_episode = (run_id, max_turns, max_tokens,
                                                                         on_episode)
        self.agent_dir = Path(cfg.dir).expanduser().resolve()
        self.progress = progress
        self.stats = RolloutStats()
        self._derived: dict[SamplingParams, Gateway] = {}
        self._done = 0
        self._lock = threading.Lock()

    def with_sampling(self, sampling: SamplingParams, *, progress: Progress | None = None,
                      on_episode: OnEpisode | None = None) -> AgentRollouts:
        """The same agents, pool and Scorer through a gateway that samples with `sampling` (held-out
        evaluation's sampled and greedy passes); that gateway is kept for the next call and closed by
        `close`."""
        gateway = self._derived.get(sampling)
        if gateway is None:
            gateway = self._derived[sampling] = Gateway(self.gateway.policy, sampling,
                                                        model_name=self.gateway.model_name)
        return AgentRollouts(gateway, self.pool, self.scorer, self.cfg, run_id=self.run_id,
                             max_turns=self.max_turns,
                             max_tokens=self.max_tokens, progress=progress, on_episode=on_episode)

    def close(self) -> None:
        for gateway in self._derived.values():
            gateway.close()
        self._derived.clear()

    def run(self, tasks: Sequence[Task], group_size: int = 1, *, step: int = 0, seed: int = 0,
            repeats: Sequence[int] | None = None) -> list[Episode]:
        """`group_size` episodes per task (sharing a group_id), in task order then sample order, with the
        group ids and seeds of every driver (`rlvr.rollout.core.rollouts.samples`)."""
        t0 = time.perf_counter()
        jobs = samples(tasks, group_size, repeats)
        self._done, total = 0, len(jobs)
        with ThreadPoolExecutor(self.cfg.concurrency, thread_name_prefix="rlvr-agent") as ex:
            episodes = list(ex.map(lambda job: self._guarded(job, step, seed, group_size, total), jobs))
        self.stats = RolloutStats(episodes=len(episodes), wall_s=time.perf_counter() - t0,
                                  generated_tokens=sum(e.num_generated_tokens for e in episodes),
                                  generate_calls=sum(e.num_turns for e in episodes))
        if episodes and all(e.metadata.get("agent_exit_code") in (126, 127) and e.num_turns == 0
                            for e in episodes):
            why = (episodes[0].metadata.get("agent_stderr") or "").strip().splitlines()[-1:] or ["exit 127"]
            raise UserError(f"the agent command cannot start in the sandbox ({why[0]})",
                            field="agent.command",
                            fix="name a program the sandbox has (the agent's interpreter's bin/ is on PATH), "
                                "or a file under --agent-dir as $RLVR_AGENT_DIR/...")
        return episodes

    def _guarded(self, sample: Sample, step: int, seed: int, group_size: int, total: int) -> Episode:
        task = sample.task
        ep = sample.episode(run_id=self.run_id, step=step, seed=seed, group_size=group_size,
                            policy_version=getattr(self.gateway.policy, "version", 0))
        ep.timings = {"generate": 0.0, "tools": 0.0, "verify": 0.0, "total": 0.0}
        t0 = time.perf_counter()
        try:
            self.episode(task, ep, verify_with=verify_seed(seed, task.key, sample.repeat))
        except UserError:
            raise
        # infrastructure below the agent: mask this episode, keep the rest
        except Exception as exc:  # noqa: BLE001
            ep.status, ep.metadata["error"] = "infra_error", f"{type(exc).__name__}: {exc}"
        ep.timings["total"] = time.perf_counter() - t0
        if self.on_episode is not None:
            self.on_episode(ep)
        if self.progress is not None:
            with self._lock:
                self._done += 1
                self.progress(self._done, total)
        return ep

    def episode(self, task: Task, ep: Episode, *, verify_with: int | None = None) -> Episode:
        """One episode: the agent's run in its sandbox, the session's token record, the verdict (verified with
        the seed `verify_with`, the group's `verify_seed`; by default the episode's own seed)."""
        lim = task.limits
        turns = (self.max_turns or lim.max_turns) if task.multi_turn else 1
        session = self.gateway.open_session(ep.episode_id, seed=ep.seed, max_turns=turns,
                                            max_tokens=self.max_tokens or lim.max_tokens)
        episode_files = {"prompt.md": task.prompt, "key": session.key, "command": self.cfg.command,
                         "launch.py": LAUNCHER.read_text(encoding="utf-8")}
        mounts: dict[str, Any] = {EPISODE_DIR: episode_files, AGENT_DIR: str(self.agent_dir)}
        limits = ExecLimits.model_validate({"timeout_s": lim.wall_s, "memory_mb": self.cfg.memory_mb,
                                            "processes": self.cfg.processes})
        try:
            with self.pool.lease(dict(task.workspace), mounts=mounts, **environment_of(task)) as sb:
                packed = tree.has_tree(task.workspace)
                if packed:  # a tree task: the agent sees the tree, not its archive
                    tree.restore(sb)
                rel = next(r for r, target in sb.mounts if target == EPISODE_DIR)
                _readable(sb.dir / next(r for r, target in sb.mounts if target == AGENT_DIR))
                with serve_unix(self.gateway, str(sb.dir / rel / "gateway.sock"), only=session.key):
                    t0 = time.perf_counter()
                    res = sb.run(["python", f"{EPISODE_DIR}/launch.py", EPISODE_DIR, AGENT_DIR],
                                 limits=limits)
                    ep.timings["tools"] = time.perf_counter() - t0
                refused = [p for p, _ in refuse_links_out(sb)]  # an agent's links out are not its work
                files = tree.capture(sb) if packed else sb.read_files(None)
        finally:
            self.gateway.close_session(session.key)
        session.fill(ep)
        ep.metadata.update({"agent": self.cfg.command, "agent_status": res.status.value,
                            "agent_exit_code": res.exit_code, "agent_stderr": res.stderr[-STDERR_KEPT:]})
        if res.status == ExecStatus.infra_error:
            ep.status, ep.metadata["error"] = "infra_error", res.error or "sandbox infrastructure fault"
            return ep
        ep.metadata["multi_turn"] = task.multi_turn
        truncated_by = session.truncated_by or ("wall" if res.status == ExecStatus.timeout else None)
        ep.status = "truncated" if truncated_by else "done"  # type: ignore[assignment]
        ep.truncated_by = truncated_by
        if session.max_tokens:
            ep.metadata[TOKEN_BUDGET] = session.max_tokens
        answer = res.stdout.strip() or None
        ep.final_state = FinalState(files=files, answer=answer, refused=refused)
        scored = self.scorer.score(task, ep.final_state, ep.seed if verify_with is None else verify_with)
        ep.verdict, ep.reward = scored.verdict, scored.reward
        ep.timings["verify"] = scored.seconds
        if scored.infra_error is not None:
            ep.status = "infra_error"
        return ep
