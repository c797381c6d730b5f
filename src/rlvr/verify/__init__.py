"""How it is judged: the Verifier protocol, the Verdict, answer extraction, the guard process, integrity
checks, and the Scorer, the one seam from an episode's final state to its verdict and reward."""
from rlvr.verify.base import Verifier, VerifyContext, kind_of, make_verifier, verify
from rlvr.verify.scorer import RemoteVerifier, Scored, Scorer
from rlvr.verify.verdict import Check, Evidence, Flag, Verdict

__all__ = ["Check", "Evidence", "Flag", "RemoteVerifier", "Scored", "Scorer", "Verdict", "Verifier",
           "VerifyContext",
           "kind_of", "make_verifier", "verify"]
