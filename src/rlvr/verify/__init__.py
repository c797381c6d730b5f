"""How it is judged: the Verifier protocol, the Verdict, one module per verifier kind, integrity checks."""
from rlvr.verify.base import Verifier, VerifyContext, kind_of, make_verifier, register_verifier, verify
from rlvr.verify.verdict import Check, Evidence, Flag, Verdict

__all__ = ["Check", "Evidence", "Flag", "Verdict", "Verifier", "VerifyContext", "kind_of", "make_verifier",
           "register_verifier", "verify"]
