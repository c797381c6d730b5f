"""The `harbor` domain: Harbor tasks (Harbor 0.25.0's task format) in and out.

In: the tasks SPEC `harbor:PATH` names one Harbor task directory or a directory of them (`format`: task.toml,
instruction.md, environment/, tests/, solution/); the model acts in the task's image with the file tools and
a terminal, tests/test.sh judges the final state in a fresh lease (`verifier`), and every task proves its
verifier with solution/solve.sh and four negative controls (`source`). Out: `rlvr tasks export --format
harbor` writes rlvr tasks of any domain as Harbor tasks whose tests run rlvr's own verifier (`export`).
docs/HARBOR.md maps the format part by part.
"""
from rlvr.domains.harbor.settings import DOMAIN_NAME, HarborSettings
from rlvr.domains.harbor.source import HarborSource
from rlvr.domains.harbor.verifier import HarborVerifier
from rlvr.envs.tools import BASH
from rlvr.tasks.domain import Domain, NoConfig, VerifierKind

DOMAIN = Domain(
    DOMAIN_NAME, lambda _settings: HarborSource(), NoConfig,
    verifiers={DOMAIN_NAME: VerifierKind(HarborVerifier, HarborSettings)}, tools=(BASH,),
    open_path=HarborSource,
    description="Harbor tasks (task.toml, instruction.md, environment/, tests/): the tasks SPEC harbor:PATH.")
