"""The `code` domain: procedural function-writing tasks (tiers tiny..hard), judged by the trusted pytest
harness (`harness/`) or fixed io cases, with the integrity checks of `rlvr.verify`; its verifier kind `code`
also judges the repo and humaneval domains."""
from rlvr.domains.code.feedback import feedback
from rlvr.domains.code.settings import CodeSettings, task_defaults
from rlvr.domains.code.source import CodeConfig, CodeSource
from rlvr.domains.code.verifier import CodeVerifier
from rlvr.tasks.domain import Domain, VerifierKind

CODE = VerifierKind(CodeVerifier, CodeSettings)
"""The verifier kind `code`: hidden tests in the trusted harness, integrity checks, the fresh-input
differential."""

DOMAIN = Domain(
    "code", CodeSource, CodeConfig, verifiers={"code": CODE}, task_defaults=task_defaults, needs=("pytest",),
    feedback=feedback,
    description="Procedural function-writing tasks over lists, strings and numbers (tiers tiny..hard).")
