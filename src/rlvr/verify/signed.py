"""Signed result lines: how a trusted script inside a sandbox reports to its verifier.

The verifier draws a fresh key per verification and gives it to the script on stdin (never in argv, the
environment or a file, which the candidate's processes could read); the script prints one line `MARK HMAC
PAYLOAD`, the HMAC-SHA256 of the JSON payload under the key. Lines with the mark that do not verify are
forgeries, counted for the verifier to flag.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any


def new_key() -> str:
    """A fresh key (hex) for one verification."""
    return secrets.token_hex(16)


def sign(key: str, body: str) -> str:
    """The HMAC a script puts before `body` (the same computation the scripts make with the stdlib)."""
    return hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()


def authenticate(stdout: str, mark: str, key: str) -> tuple[dict[str, Any] | None, int]:
    """(the payload of the first correctly signed `mark` line, how many other `mark` lines there were)."""
    good, forged = None, 0
    for line in stdout.splitlines():
        if not line.startswith(mark + " "):
            continue
        parts = line.split(" ", 2)
        ok = len(parts) == 3 and hmac.compare_digest(sign(key, parts[2]), parts[1])
        if ok and good is None:
            try:
                good = json.loads(parts[2])
            except ValueError:
                forged += 1
        else:
            forged += 1
    return good, forged
