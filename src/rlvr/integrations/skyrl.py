"""rlvr's tasks as a skyrl-gym `BaseTextEnv`, registered under an id.

    from rlvr.integrations.skyrl import register
    register("rlvr-code", tasks="code:64")                 # skyrl_gym.make("rlvr-code", extras={...}) now
    works env = skyrl_gym.make("rlvr-code", extras={"task": "code/easy-multi-s0-3"})
    prompt, info = env.init([])                          # the Env's system message (tool-call format) +
    prompt out = env.step(model_reply)                          # observations, reward (at the end), done,
    metadata

SkyRL builds one env per trajectory from a dataset row: `extras` holds the row's fields, and the task ref is
`extras["task"]` (or `extras["extra_info"]["task"]`), a key or an index into the tasks; `extras["seed"]` seeds
verification. A multi-turn task reads the model's text tool calls (the Env's own format) and runs them in a
sandbox leased for the trajectory; a single-turn task takes the reply as its answer. The episode's last step
carries the reward from the shared Scorer and the verdict in `metadata`; `close()` gives the sandbox back.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from rlvr.errors import UserError
from rlvr.integrations.session import Runtime, tool_specs, verdict_metadata


def _get(cfg: Any, key: str) -> Any:
    if cfg is None:
        return None
    if isinstance(cfg, Mapping):
        return cfg.get(key)
    return getattr(cfg, key, None)  # an OmegaConf DictConfig, as SkyRL passes


class RlvrTextEnv(BaseTextEnv):
    """One trajectory on one rlvr task (see the module docstring)."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None, *,
                 runtime: Runtime | None = None, tasks: str | None = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        if runtime is None:
            spec = _get(env_config, "tasks") or tasks  # SkyRL's own env_config for this id wins
            if not spec:
                raise UserError("the rlvr skyrl env needs tasks", field="env_config.tasks",
                                fix="register(id, tasks='code:64') or pass env_config={'tasks': SPEC}")
            runtime = Runtime.shared(str(spec))
        self.runtime = runtime
        ref = extras.get("task", _get(extras.get("extra_info"), "task"))
        self.seed = int(extras.get("seed") or 0)
        self.task = runtime.task(ref, self.seed)
        self.max_turns = self.task.limits.max_turns
        self.session = runtime.session()

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Lease the sandbox and give the opening messages: the row's prompt when it has one, else the
        Env's."""
        messages = self.session.start(self.task, self.seed, system_prompt=self.task.multi_turn)
        opening = [{"role": m.role, "content": m.content} for m in messages]
        return (list(prompt) if prompt else opening), {"task": self.task.key, "tools": tool_specs(self.task)}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        feedback, done = self.session.act(action)
        if not done:
            return BaseTextEnvStepOutput(observations=[{"role": "user", "content": feedback}], reward=0.0,
                                         done=False,
                                         metadata={}, postprocessed_action=None)
        scored = self.session.finish()
        return BaseTextEnvStepOutput(observations=[], reward=scored.reward, done=True,
                                     metadata={**verdict_metadata(scored),
                                               "truncated_by": self.session.truncated_by},
                                     postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        scored = self.session.scored
        if scored is None:
            return {}
        return {"passed": float(scored.verdict.passed), "flagged": float(bool(scored.verdict.flags)),
                "infra_error": float(scored.infra_error is not None)}

    def close(self) -> None:
        self.session.close()


def register(env_id: str = "rlvr", *, tasks: str) -> str:
    """Register `RlvrTextEnv` over `tasks` (a SPEC) as `env_id` in skyrl-gym's registry; the id."""
    import functools

    from skyrl_gym.envs.registration import register as skyrl_register

    Runtime.shared(tasks)  # bad SPECs fail here, not in a rollout worker
    skyrl_register(id=env_id, entry_point=functools.partial(RlvrTextEnv, tasks=tasks))
    return env_id
