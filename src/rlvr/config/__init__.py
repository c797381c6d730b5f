"""RunConfig: the one typed config object of a run, loaded from TOML.

Every field is documented by the docstring under it (`rlvr train --help-config` prints them). Validation
raises a UserError naming the file and field and never rewrites a user's value. Command-line overrides use
dotted keys (`train.lr=1e-4`); their values are parsed as TOML values, falling back to plain strings.
Each run writes its resolved config to `<run_dir>/config.toml`.

The sections are `rlvr.config.sections`; RunConfig, loading, overrides and the field descriptions are
`rlvr.config.run_config`. Everything is imported from here.
"""
from rlvr.config.run_config import (
    CONFIG_SCHEMA_VERSION,
    QUICKSTART,
    RunConfig,
    apply_override,
    describe_fields,
    load_config,
)
from rlvr.config.sections import (
    AgentConfig,
    BudgetConfig,
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

__all__ = ["CONFIG_SCHEMA_VERSION", "AgentConfig", "BudgetConfig", "ClusterConfig", "MonitorConfig",
           "PolicyConfig", "QUICKSTART",
           "RolloutConfig", "RunConfig", "SFTConfig", "SandboxConfig", "ScheduleConfig", "Section",
           "StoreConfig",
           "TasksConfig", "TrainConfig", "apply_override", "describe_fields", "load_config"]
