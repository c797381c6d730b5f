"""The `rules` domain: business rules as declarative checks compiled by rlvr, credit per check."""
from rlvr.domains.rules.source import RulesConfig, RulesSource
from rlvr.domains.rules.verifier import RulesSettings, RulesVerifier
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain(
    "rules", RulesSource, RulesConfig, verifiers={"rules": VerifierKind(RulesVerifier, RulesSettings)},
    description="Business rules (invoice pricing, staff rotas, expense policy) with declarative checks "
                "compiled by rlvr; credit per check.")
