"""The reward a Harbor verification wrote, as an rlvr Verdict.

tests/test.sh writes its reward under /logs/verifier, a directory the verification run made fresh (a scratch
tmpfs of that run alone: nothing the agent wrote during its episode can be there). Harbor's own rules, as its
verifier reads them:

- `reward.json` first, else `rewards.json` (the name Harbor's template task gives it), else `reward.txt`;
- `reward.txt` holds one number; a JSON file holds a number or a table of numbers (`{"reward": 0.5,
  "style": 1}`); every value finite. rlvr also needs each in [0, 1], the range of its scores.

One score from a table: its `reward` entry when it has one (the 1-D convention; the other entries are kept as
checks of weight 0, for the record), else the mean of its entries, each a check of equal weight: partial
credit is kept either way. A verdict passes when its score is 1.

A reward file that is missing, empty, not a number or out of range scores 0, with one line naming the file and
the fix (`rlvr tasks validate` shows it for the gold state). Not an infra error: that would mask the episode,
and a candidate whose code breaks the reward file during the tests would escape the 0 its attempt earned.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping

from rlvr.verify.verdict import Check, Verdict

LOGS = "/logs"
"""The scratch directory a verification run gets fresh (Harbor's /logs: verifier/, agent/, artifacts/)."""
VERIFIER_DIR = f"{LOGS}/verifier"
REWARD_FILES = (f"{VERIFIER_DIR}/reward.json", f"{VERIFIER_DIR}/rewards.json", f"{VERIFIER_DIR}/reward.txt")
"""Where the reward is read from, in order of precedence."""
FIX = 'write one number in [0, 1] to /logs/verifier/reward.txt, or {"reward": 0.5} to reward.json'


class RewardError(ValueError):
    """A reward file rlvr cannot read (the message is one line naming the file)."""


def _number(value: object, file: str, key: str | None = None) -> float:
    where = f"{file}" + (f" [{key!r}]" if key is not None else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RewardError(f"{where} is not a number ({str(value)[:40]!r}): {FIX}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise RewardError(f"{where} is {value!r}, outside [0, 1]: {FIX}")
    return float(value)


def read_rewards(files: Mapping[str, str]) -> tuple[str, dict[str, float]]:
    """(the file read, its rewards by name: `reward` for a single number) from the files of /logs/verifier
    (absolute path -> text) that the verification left; raises RewardError."""
    file = next((f for f in REWARD_FILES if f in files), None)
    if file is None:
        raise RewardError(f"tests/test.sh wrote no reward ({', '.join(REWARD_FILES)}): {FIX}")
    text = files[file].strip()
    if not text:
        raise RewardError(f"{file} is empty: {FIX}")
    if file.endswith(".txt"):
        try:
            value: object = float(text)
        except ValueError:
            raise RewardError(f"{file} is not a number ({text[:40]!r}): {FIX}") from None
        return file, {"reward": _number(value, file)}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise RewardError(f"{file} is not JSON ({text[:40]!r}): {FIX}") from None
    if isinstance(value, dict):
        if not value:
            raise RewardError(f"{file} is an empty table: {FIX}")
        return file, {str(k): _number(v, file, str(k)) for k, v in value.items()}
    return file, {"reward": _number(value, file)}


def verdict_of(rewards: Mapping[str, float], file: str) -> Verdict:
    """The Verdict of a reward table (see the module docstring for the score of several entries)."""
    main = rewards.get("reward")
    checks = [Check(name=f"{file}:{key}", score=value, passed=value >= 1.0,
                    weight=(1.0 if key == "reward" else 0.0) if main is not None else 1.0,
                    detail=f"{key} = {value:g}")
              for key, value in rewards.items()]
    score = main if main is not None else sum(rewards.values()) / len(rewards)
    return Verdict(score=score, passed=score >= 1.0, checks=checks)


def failed(reason: str, **details: object) -> Verdict:
    """A verification that earned nothing, with one line saying why."""
    return Verdict(score=0.0, passed=False, checks=[Check(name="tests/test.sh", score=0.0, detail=reason)],
                   details=dict(details))
