"""The `extraction` domain: financial documents with distractors, the JSON answer reconciled field by
field."""
from rlvr.domains.extraction.source import ExtractionConfig, ExtractionSource
from rlvr.domains.extraction.verifier import ExtractionVerifier
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain(
    "extraction", ExtractionSource, ExtractionConfig,
    verifiers={"extraction": VerifierKind(ExtractionVerifier)},
    description="Financial extraction (income statements, balance sheets, invoices) with distractors; JSON "
                "reconciled field by field with tolerances and business rules.")
