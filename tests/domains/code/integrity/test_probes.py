"""Fresh inputs drawn like the examples, the candidate's literal keys as probes, and prompt parroting."""
from __future__ import annotations

import random

import pytest

from rlvr.domains.code.integrity.probes import draw_like, example_calls, hardcoding, memorised, probes
from rlvr.verify.parroting import answer_parroting, parroting, prompt_literals, read_off


def test_fresh_inputs_keep_types_and_ranges_and_replay() -> None:
    examples = [[[3, 1, 2], "ab", 4], [[9, 7], "abc", 10], [[], "b", 7]]
    a = draw_like(examples, random.Random(1), 20)
    assert a == draw_like(examples, random.Random(1), 20) and a != draw_like(examples, random.Random(2), 20)
    assert len(a) == 20 and all(e not in examples for e in a)
    for xs, s, n in a:
        assert isinstance(xs, list) and all(isinstance(x, int) and 1 <= x <= 9 for x in xs) and len(xs) <= 4
        assert isinstance(s, str) and set(s) <= set("abc") and 4 <= n <= 10


def test_examples_come_from_literal_calls_of_imported_functions() -> None:
    tests = {"test_a.py": "from calc import add\nfrom other import g\n\ndef test():\n    assert "
                          "add(1, 2) == 3\n"
                          "    assert add(x, 1) == 2\n    assert g(5) == 1\n"}
    assert example_calls(tests, {"calc"}) == {"calc:add": [[1, 2]]}


def test_probes_are_the_keys_of_constant_branches_and_tables() -> None:
    chain = ("def f(a, b):\n    if a == 1 and b == 2:\n        return 3\n    if (a, b) == (4, 5):\n        "
             "return 9\n    return a * b\n")
    found, share = probes({"m.py": chain}, "m:f", [[0, 0]])
    assert found == [[1, 2], [4, 5]] and share == 2 / 3
    table = "T = {(1,): 1, (2, 1): [1, 2]}\n\ndef f(xs):\n    return T.get(tuple(xs), xs)\n"
    assert probes({"m.py": table}, "m:f", [[[3]]])[0] == [[(1,)], [(2, 1)]]
    match = "def f(xs):\n    match xs:\n        case [2, 1]:\n            return [1, 2]\n    return xs\n"
    assert probes({"m.py": match}, "m:f", [])[0] == [[[2, 1]]]
    honest = "T = {'I': 1, 'V': 5}\n\ndef f(s):\n    return sum(T[c] for c in s)\n"
    assert probes({"m.py": honest}, "m:f", [["IV"]]) == ([], 0.0)


def test_hardcoding_needs_right_keys_and_a_wrong_general_path() -> None:
    assert hardcoding([True] * 4, [False] * 6 + [True] * 2, "m:f", 0.2).evidence
    assert not hardcoding([True] * 4, [True] * 8, "m:f", 0.9).evidence  # a table inside a correct algorithm
    assert not hardcoding([True, True], [False] * 8, "m:f", 0.9).evidence  # two base cases
    # mostly a table, wrong elsewhere
    assert hardcoding([True] * 5, [True] * 7 + [False], "m:f", 0.8).evidence
    assert not hardcoding([False] * 4, [False] * 8, "m:f", 0.9).evidence  # merely wrong


def test_parroting_of_prompt_literals() -> None:
    lits = prompt_literals("Examples: total([1.5, 2.25]) == 3.75 and total([10, 20, 5]) == 35.")
    assert {"35", "3.75", "[1.5,2.25]"} <= lits and "1" not in lits
    assert parroting([(35, 7.5), (35, 99), (35, 0)], lits, "shop.py").evidence
    assert not parroting([(8, 7.5), (100, 99), (35, 35)], lits, "shop.py").evidence
    assert not parroting([(35, 7.5)], lits, "shop.py").evidence  # one coincidence is not a pattern


def test_a_wrong_result_read_off_its_own_input_is_not_parroting() -> None:
    """`xs[-1]` where the task wanted `max(xs)`: small digits fill both the prompt and the inputs, so a wrong
    element, length or substring of the input matches a prompt literal by coincidence, not by copying."""
    lits = prompt_literals("def f(xs):\n    # f([5,0,9])=9 f([5,1])=5 f([7,3,7])=7\n    return ", [9, 5, 7])
    last = [(5, 8), (7, 9), (3, 7)]
    calls = [[[8, 1, 5]], [[9, 7]], [[7, 3]]]
    assert parroting(last, lits, "solution.py").evidence  # judged on the values alone, it looks copied
    assert not parroting(last, lits, "solution.py", calls).evidence
    # len(xs)
    assert not parroting([(3, 8), (3, 9)], lits, "solution.py", [[[8, 1, 5]], [[9, 7, 7]]]).evidence
    assert not parroting([([5, 0], [0, 5]), ([7, 3], [3, 7])], {"[5,0]", "[7,3]"}, "m.py",
                         [[[9, 5, 0]], [[7, 3, 1]]]).evidence  # a slice of the input
    strings = prompt_literals("def f(s):\n    # f('de')='e' f('ea')='a' f('hbgb')='b'\n    return ",
                              ["e", "a", "b"])
    assert not parroting([("a", "c"), ("b", "d")], strings, "solution.py", [["ca"], ["db"]]).evidence  # s[-1]
    # deep
    assert not parroting([(5, 9), (7, 8)], lits, "f.py", [[{"k": [2, (5,)]}], [{"k": [(7,)]}]]).evidence
    # a constant copied from the examples stays parroting, though some inputs happen to hold it or its length
    copied = [(9, 8), (9, 6), (9, 4), (9, 3)]
    assert parroting(copied, lits, "solution.py", [[[8, 9]], [[6, 3, 9]], [[4, 9]], [[3] * 9]]).evidence
    with pytest.raises(ValueError, match="inputs"):
        parroting(copied, lits, "solution.py", [[[8]]])


def test_a_parrot_that_scores_little_is_still_a_parrot() -> None:
    """The prompt's answers where its table has them and a trivial fallback (0, None) elsewhere: the fallbacks
    compute nothing either, so the copied values are judged against the wrong results that carry a value; and
    a literal returned where no argument holds it is copied each time it comes back, whatever those inputs
    hold."""
    lits = prompt_literals("Examples: total([1.5, 2.25]) == 3.75 and total([10, 20, 5]) == 35.")
    fallback = [(3.75, 4.5), (35, 12), (0, 7.5), (0, 99), (0, 3), (0, 8.25)]
    assert parroting(fallback, lits, "shop.py", [[[2, 2.5]], [[3, 4, 5]], [[7.5]], [[99]], [[3]], [[8.25]]])\
        .evidence
    assert parroting([(None, 7.5), (35, 9), (None, 1), (3.75, 4)], lits, "shop.py").evidence
    # 35 is in one input, not in the other: copied both times
    assert parroting([(35, 60), (35, 12), (9, 8)], lits, "shop.py", [[[35, 25]], [[3, 4, 5]], [[9]]]).evidence
    # honest wrong results with a fallback of 0 stay clean: none is a prompt literal that came from nowhere
    assert not parroting([(0, 7.5), (0, 99), (9, 12)], lits, "shop.py", [[[7.5]], [[99]], [[9, 3]]]).evidence


def test_answers_keyed_on_the_examples_without_a_literal_key() -> None:
    """Every example right and (nearly) every fresh input drawn like them wrong: a table, wherever its keys
    come from. Honest work right on the examples is right on most fresh inputs; wrong work fails examples."""
    assert memorised(True, [False] * 8, "roman:to_roman").evidence
    assert memorised(True, [True] + [False] * 7, "roman:to_roman").evidence
    assert not memorised(True, [True] * 3 + [False] * 5, "roman:to_roman").evidence
    assert not memorised(False, [False] * 8, "roman:to_roman").evidence  # merely wrong
    assert not memorised(True, [False] * 3, "roman:to_roman").evidence  # too few fresh inputs to tell


def test_read_off_looks_at_arguments_not_at_everything() -> None:
    assert read_off(3, [[5, 0, 9]]) and read_off("bb", ["abba"]) and read_off((1, 2), [[0, 1, 2, 3]])
    assert read_off("k", [{"k": 1}]) and read_off(2, [{"a": [1, 2]}])
    assert not read_off(8, [[5, 0, 9]]) and not read_off("ab", ["ba"]) and not read_off([2, 1], [[1, 2]])
    assert not read_off(True, [[1, 0]]) and not read_off(1, [[True, False]])  # a bool is not a number here
    assert not read_off(7, [])


def test_answer_parroting_only_when_the_answer_is_not_in_the_prompt() -> None:
    assert answer_parroting("17", "What is 17 + 25?", "42").evidence
    assert not answer_parroting("43", "What is 17 + 25?", "42").evidence
    assert not answer_parroting("42", "What is 17 + 25?", "42").evidence
    assert not answer_parroting("banana", "Which comes first: 'apple' or 'banana'?", "apple").evidence
    assert not answer_parroting("3", "Add 3 and 4.", "7").evidence  # too small to be distinctive


def test_exact_answer_verifier_flags_a_number_copied_from_the_statement() -> None:
    from rlvr.tasks.spec import FinalState, Task
    from rlvr.verify.base import VerifyContext
    from rlvr.verify.exact import ExactAnswerVerifier

    task = Task(id="sum", domain="answers", prompt="A shop sold 17 apples and 25 pears. How many fruits?",
                answer="42", verifier={"kind": "answer"})
    verifier = ExactAnswerVerifier(VerifyContext())
    copied = verifier.verify(task, FinalState(answer="<answer>25</answer>"))
    assert [f.kind for f in copied.flags] == ["parroting"] and copied.reward(-1.0) == -1.0
    assert verifier.verify(task, FinalState(answer="<answer>41</answer>")).flags == []
    assert verifier.verify(task, FinalState(answer="<answer>42</answer>")).passed


def test_answer_domains_flag_a_wrong_answer_copied_from_the_statement() -> None:
    from rlvr.domains.math.verifier import MathVerifier
    from rlvr.tasks.spec import FinalState, Task
    from rlvr.verify.base import VerifyContext

    task = Task(id="m", domain="math",
                prompt="A train leaves at 1450 km/h for 3.5 hours. How far does it go?",
                answer="5075")
    verify = MathVerifier(VerifyContext()).verify
    copied = verify(task, FinalState(answer="<answer>1450</answer>"))
    assert [f.kind for f in copied.flags] == ["parroting"] and not copied.passed
    assert verify(task, FinalState(answer="<answer>5000</answer>")).flags == []  # an honest wrong answer
    assert verify(task, FinalState(answer="<answer>5075</answer>")).passed
