"""The `config` domain (this package: `config_docs`, apart from the run config `rlvr.config`): configuration
documents checked by JSON Schema and semantic rules, credit per rule."""
from rlvr.domains.config_docs.source import ConfigDomainConfig, ConfigSource
from rlvr.domains.config_docs.verifier import ConfigVerifier
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain(
    "config", ConfigSource, ConfigDomainConfig, verifiers={"config": VerifierKind(ConfigVerifier)},
    requirements=("jsonschema",),
    description="Configuration generation (deployments, CI pipelines) checked by JSON Schema and semantic "
                "rules, with credit per rule.")
