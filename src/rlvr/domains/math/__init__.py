"""The `math` domain: final-answer math (procedural tiers or JSONL packs) checked with math-verify."""
from rlvr.domains.math.source import MathConfig, make_source
from rlvr.domains.math.verifier import MathVerifier
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain(
    "math", make_source, MathConfig, verifiers={"math": VerifierKind(MathVerifier)},
    requirements=("math-verify",),
    description="Final-answer math (fractions, equations, sets of roots, intervals) checked with "
                "math-verify; procedural tiers or JSONL packs.")
