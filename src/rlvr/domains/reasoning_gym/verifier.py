"""Kind `reasoning-gym`: strict scoring of reasoning-gym answers (exact final answer or nothing).

reasoning-gym's own `score_answer` is lenient for some datasets (partial credit for an answer that merely
contains the right one, the first number found in free text, `bool(answer)`, any expression equal to 24
whatever numbers it uses). Here a response earns 1.0 only when its single marked final answer (see
`rlvr.verify.extract`) equals the reference after whitespace normalisation, or when

- the dataset's scorer gives it full marks, and
- the dataset's guard in `GUARDS` accepts it, or, for a dataset without a guard, the scorer proves strict on
  this very item: it rejects the empty answer, the echoed question and the reference buried among junk or a
  wrong number.

Otherwise the score is 0; the package's partial credit is reported in `details`, never counted.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rlvr.domains.reasoning_gym.source import EXAMPLE_FILE, dataset, entry_of
from rlvr.tasks.spec import FinalState, Task
from rlvr.verify.base import VerifyContext
from rlvr.verify.extract import Fallback, extract_answer, normalize_text
from rlvr.verify.guard import guarded
from rlvr.verify.parroting import answer_parroting
from rlvr.verify.verdict import Check, Flag, Verdict

Guard = Callable[[str, dict[str, Any]], bool]


def _exact_only(answer: str, entry: dict[str, Any]) -> bool:
    return False  # the scorer accepts too much: only the exact reference (checked before guards) counts


def _uses_given_numbers(answer: str, entry: dict[str, Any]) -> bool:
    used = sorted(int(n) for n in re.findall(r"\d+", answer))
    return used == sorted(int(n) for n in entry["metadata"]["numbers"])


def _only_legal_moves(answer: str, entry: dict[str, Any]) -> bool:
    """Nothing but moves, and every move made in full (the package silently skips blocked moves)."""
    if re.fullmatch(r"\s*[A-Z][+-]\d+(?:[\s,]+[A-Z][+-]\d+)*\s*", answer) is None:
        return False
    from reasoning_gym.games.rush_hour import Board

    board = Board(entry["metadata"]["board_config"])
    for letter, sign, steps in re.findall(r"([A-Z])([+-])(\d+)", answer):
        index = ord(letter) - ord("A")
        if index >= len(board._pieces) or board._pieces[index].fixed:
            return False
        before = board._pieces[index].position
        board.move(letter, int(steps) if sign == "+" else -int(steps))
        moved = abs(board._pieces[index].position - before) // board._pieces[index].stride
        if moved != int(steps):
            return False
    return True


_CUBE_MOVE = r"\d*[UDLRFBMESXYZudlrfbxyz]w?'?\d*'?"


def _only_cube_moves(answer: str, entry: dict[str, Any]) -> bool:
    return re.fullmatch(rf"\s*{_CUBE_MOVE}(?:[\s,]+{_CUBE_MOVE})*\s*", answer) is not None


GUARDS: dict[str, Guard] = {
    "game_of_life_halting": _exact_only,  # scores bool(answer): any non-empty text passes
    "gsm_symbolic": _exact_only,  # takes the first number anywhere in the text
    "knights_knaves": _exact_only,  # skips text it cannot parse, so junk around the answer passes
    "puzzle24": _uses_given_numbers,  # accepts any expression equal to 24, whatever numbers it uses
    "rush_hour": _only_legal_moves,  # picks moves out of any text, skips blocked ones
    "rubiks_cube": _only_cube_moves,  # skips tokens that are not moves
}
"""Conditions that replace the probe test for datasets whose scorer is known to be lenient (found by auditing
every scorer with the negative controls); `scorer_is_strict` catches leniency the table does not know of."""


def package_score(ds: Any, answer: str, entry: dict[str, Any]) -> float:
    """The dataset's own score of `answer`; a scorer that crashes on an answer rejects it."""
    try:
        return float(ds.score_answer(answer, entry))
    except Exception:  # noqa: BLE001
        return 0.0


def _probes(entry: dict[str, Any], gold: str | None) -> dict[str, str]:
    probes = {"empty": "", "echoed_question": str(entry.get("question", ""))}
    if gold is not None:
        probes["buried_in_junk"] = f"none of these\n{gold}\nnone of these"
        probes["buried_after_wrong"] = f"0\n{gold}"
        probes["buried_before_wrong"] = f"{gold}\n0"
        probes["negated"] = f"The answer is not {gold}."
    return probes


def scorer_is_strict(ds: Any, entry: dict[str, Any], reference: str | None = None) -> tuple[bool, str]:
    """(strict, the first probe it wrongly accepted) for the dataset's scorer on this entry; `reference` is a
    known valid answer (the entry's answer, or the example of a dataset with many solutions)."""
    gold = entry.get("answer") if entry.get("answer") is not None else reference
    for name, text in _probes(entry, None if gold is None else str(gold)).items():
        if gold is not None and normalize_text(text) == normalize_text(str(gold)):
            continue
        if package_score(ds, text, entry) >= 1.0:
            return False, name
    return True, ""


def strict_score(name: str, ds: Any, entry: dict[str, Any], answer: str,
                 reference: str | None = None) -> tuple[bool, str, float | None]:
    """(correct, why, the package's own score when it was asked) under the strict rules above."""
    gold = entry.get("answer")
    if gold is not None and normalize_text(answer) == normalize_text(str(gold)):
        return True, "exact match", None
    score = package_score(ds, answer, entry)
    if score < 1.0:
        return False, f"wrong (the package's partial credit {score:.2f} is not counted)", score
    guard = GUARDS.get(name)
    if guard is not None:
        if guard(answer, entry):
            return True, "accepted by the dataset's scorer and its format guard", score
        return False, "not the exact answer, and this dataset's scorer is too lenient to trust alone", score
    strict, probe = scorer_is_strict(ds, entry, reference)
    if not strict:
        return (False,
                f"the dataset's scorer accepted the probe {probe!r} here; only the exact answer counts",
                score)
    return True, "accepted by the dataset's scorer", score


def strict_score_of(name: str, seed: int, size: int, settings: dict[str, Any], index: int, answer: str,
                    reference: str | None) -> tuple[bool, str, float | None]:
    """`strict_score` for item `index` of a dataset, rebuilt (and cached) in whichever process runs it."""
    from rlvr.domains.reasoning_gym.source import item

    return strict_score(name, dataset(name, seed, size, settings), item(name, seed, size, settings, index),
                        answer, reference)


class ReasoningGymVerifier:
    """Strict final-answer verifier for every `rg-*` domain."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx

    def verify(self, task: Task, final: FinalState) -> Verdict:
        meta = task.metadata
        name = str(meta["dataset"])
        entry = entry_of(task)
        found = extract_answer(final.answer, Fallback.whole)
        details: dict[str, Any] = {"extracted": found.text, "how": found.how}
        if found.text is None:
            return Verdict.from_checks([Check(name="answer", score=0.0, detail=found.problem)],
                                       details=details)
        flags: list[Flag] = []
        if normalize_text(found.text) == normalize_text(str(entry.get("question", ""))):
            flags.append(Flag(kind="parroting", message="the answer repeats the question"))
        expected = entry.get("answer")
        if expected is not None and normalize_text(found.text) == normalize_text(str(expected)):
            ok, why, score = True, "exact match", None
        else:  # the package's scorers run third-party parsers (sympy) on the answer: not in this process
            done, result = guarded(strict_score_of, name, int(meta["rg_seed"]), int(meta["rg_size"]),
                                   dict(meta.get("settings", {})), int(task.index or 0), found.text,
                                   task.hidden.get(EXAMPLE_FILE), warm=("reasoning_gym",))
            failed = (False, f"the dataset's scorer failed on this answer: {result}", None)
            ok, why, score = result if done else failed
        if score is not None:
            details["package_score"] = score
        if EXAMPLE_FILE in task.hidden:
            details["multiple_solutions"] = True
        if not ok and entry.get("answer") is not None:  # a wrong answer copied from the question
            flags += answer_parroting(found.text, str(entry.get("question", "")),
                                      str(entry["answer"])).flags()
        check = Check(name="answer", score=float(ok), passed=ok, detail=why)
        return Verdict.from_checks([check], flags=flags, details=details)
