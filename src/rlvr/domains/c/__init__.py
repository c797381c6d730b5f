"""The `c` domain: C modules to implement or fix (strings, buffers, parsing, data structures) in an image with
gcc and make, judged by a hidden harness compiled against the final sources with AddressSanitizer and UBSan,
each case in its own process; multi-turn tasks get a bash terminal."""
from rlvr.domains.c.settings import CConfig, CSettings
from rlvr.domains.c.source import CSource
from rlvr.domains.c.verifier import CVerifier
from rlvr.envs.tools import BASH
from rlvr.tasks.domain import Domain, VerifierKind

DOMAIN = Domain("c", CSource, CConfig, verifiers={"c": VerifierKind(CVerifier, CSettings)}, tools=(BASH,),
                description="C modules to implement or fix with gcc and make, judged under AddressSanitizer "
                            "and UBSan (tiers easy..hard).")
