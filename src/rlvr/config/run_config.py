"""RunConfig: the one typed config object of a run, loaded from TOML (with dotted command-line overrides),
written back resolved, and described field by field (`rlvr train --help-config`)."""
from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

import tomli_w
import tomllib
from pydantic import BaseModel, Field, ValidationError, model_validator

from rlvr.atomic import atomic_write
from rlvr.config.sections import (
    AgentConfig,
    ClusterConfig,
    MonitorConfig,
    PolicyConfig,
    RolloutConfig,
    SandboxConfig,
    ScheduleConfig,
    Section,
    SFTConfig,
    StoreConfig,
    TasksConfig,
    TrainConfig,
)
from rlvr.errors import UserError

CONFIG_SCHEMA_VERSION = 1

QUICKSTART = Path(__file__).with_name("quickstart.toml")
"""The built-in quickstart's config: what `rlvr train` runs without a config file. Its settings (the code
domain's `tiny` tier, the run name) are its own, not defaults of RunConfig, so no other command inherits
them."""


class RunConfig(Section):
    """The whole configuration of a run."""

    name: str = "run"
    """Run name; the run directory is `<output_dir>/<name>` (the quickstart's is `quickstart`)."""
    output_dir: str = "runs"
    """Parent directory of run directories."""
    seed: int = 0
    """Master seed (task sampling, generation, initialisation)."""
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    schema_version: int = CONFIG_SCHEMA_VERSION
    """Version of the config layout (written with every resolved config)."""

    @model_validator(mode="after")
    def _engines_need_ray(self) -> RunConfig:  # disaggregated generation: the engines are Ray actors
        if self.policy.engines and not self.cluster.address:
            raise UserError(f"engines = {self.policy.engines} runs the engines on Ray, and no Ray "
                            f"address is set",
                            field="policy.engines",
                            fix='set [cluster] address = "auto" (or pass --cluster ADDRESS)')
        rank = self.policy.engine_lora_rank
        if rank and self.train.lora and rank < self.train.lora_rank:
            raise UserError(f"engine_lora_rank = {rank} cannot load the run's adapters of rank "
                            f"{self.train.lora_rank}",
                            field="policy.engine_lora_rank",
                            fix=f"set it to {self.train.lora_rank}, or leave it 0")
        return self

    @model_validator(mode="after")
    def _budget_holds_an_episode(self) -> RunConfig:  # refused at load, not after the first rollout
        budget, context = self.train.micro_batch_tokens, self.rollout.max_context_tokens
        if budget is not None and context is not None and budget < context:
            raise UserError(f"micro_batch_tokens = {budget} is smaller than an episode may be "
                            f"(rollout.max_context_tokens = {context})", field="train.micro_batch_tokens",
                            fix=f"set it to at least {context}, or lower rollout.max_context_tokens")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name

    def to_toml(self) -> str:
        """The resolved config as TOML (None values are left out: TOML has no null)."""
        return tomli_w.dumps(_drop_none(self.model_dump(mode="json")))

    def write(self, run_dir: str | Path) -> Path:
        """Write the resolved config to `<run_dir>/config.toml` atomically."""
        return atomic_write(Path(run_dir) / "config.toml", self.to_toml())


def _drop_none(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _drop_none(v) for k, v in d.items() if v is not None}
    if isinstance(d, list):
        return [_drop_none(v) for v in d]
    return d


def _parse_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _model_at(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = RunConfig
    for key in path:
        ann = model.model_fields[key].annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            return None
    return model


def apply_override(data: dict[str, Any], override: str, source: str = "command line") -> None:
    """Apply one `a.b.c=value` override to raw config data, refusing unknown keys."""
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"override {override!r} is not KEY=VALUE", file=source,
                        fix="write e.g. train.lr=1e-4")
    parts = key.split(".")
    model: type[BaseModel] | None = RunConfig
    node = data
    for i, part in enumerate(parts):
        parent = model
        if model is not None:
            if part not in model.model_fields:
                close = difflib.get_close_matches(part, list(model.model_fields), n=1)
                hint = (f"did you mean {'.'.join(parts[:i] + close)!r}?" if close
                        else "see rlvr train --help-config")
                raise UserError("unknown config key", file=source, field=key, fix=hint)
            model = _model_at(parts[: i + 1])
        if i == len(parts) - 1:
            node[part] = _parse_value(raw.strip())
        else:
            # a table field: its default, extended
            if part not in node and parent is not None and model is None:
                node[part] = _table_default(parent, part)
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise UserError("is not a table", file=source, field=".".join(parts[: i + 1]),
                                fix="override a leaf key")
            node = nxt


def _table_default(model: type[BaseModel], name: str) -> dict[str, Any]:
    """A copy of a table field's default, so that a dotted override extends a table with a non-empty default
    (`schedule.weights`, `tasks.domains` are empty) instead of replacing it; a table the file sets is
    extended in place."""
    f = model.model_fields[name]
    default = f.default_factory() if f.default_factory else f.default  # type: ignore[call-arg]
    return copy.deepcopy(default) if isinstance(default, dict) else {}


def _config_error(exc: ValidationError, file: str) -> UserError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        parts = [str(p) for p in err["loc"]]
        model = _model_at(parts[:-1]) or RunConfig
        close = difflib.get_close_matches(parts[-1], list(model.model_fields), n=1)
        hint = f"did you mean {'.'.join(parts[:-1] + close)!r}?" if close else "see rlvr train --help-config"
        return UserError("unknown config key", file=file, field=loc, fix=hint)
    got = err.get("input")
    fix = f"got {got!r}" if not isinstance(got, dict) else "see rlvr train --help-config"
    return UserError(err["msg"], file=file, field=loc, fix=fix)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Load a RunConfig from TOML (None: RunConfig's defaults, which every command starts from; `QUICKSTART`:
    the built-in quickstart) and apply dotted overrides."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        source = str(p)
        if not p.is_file():
            raise UserError("no such config file", file=p, fix="check the path")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"TOML syntax error: {exc}", file=p, fix="fix the syntax") from None
    for ov in overrides:
        apply_override(data, ov)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, source if not overrides else f"{source} (+ overrides)") from None
    except UserError as exc:  # raised by a validator (policy.engines): name the file too
        raise UserError(exc.what, file=source if not overrides else f"{source} (+ overrides)",
                        field=exc.field,
                        fix=exc.fix) from None


def describe_fields(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, doc) for every leaf field, for --help-config."""
    rows: list[tuple[str, str, str, str]] = []
    for name, f in model.model_fields.items():
        ann = f.annotation
        key = f"{prefix}{name}"
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(describe_fields(ann, key + "."))
            continue
        default = f.default_factory() if f.default_factory else f.default  # type: ignore[call-arg]
        tname = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
        rows.append((key, tname, repr(default), " ".join((f.description or "").split())))
    return rows
