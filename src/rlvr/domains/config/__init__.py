"""The `config` domain: configuration documents checked by JSON Schema and semantic rules, credit per rule."""
from rlvr.domains.config.source import ConfigDomainConfig, ConfigSource
from rlvr.domains.config.verifier import ConfigVerifier
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain(
    "config", ConfigSource, ConfigDomainConfig, verifiers={"config": VerifierKind(ConfigVerifier)},
    description="Configuration generation (deployments, CI pipelines) checked by JSON Schema and semantic "
                "rules, with credit per rule.")
