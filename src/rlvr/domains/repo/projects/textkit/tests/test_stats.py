from textkit.stats import average_sentence_length, frequencies, top_words

TEXT = "the cat and the hat. The bat! a cat sat"


def test_frequencies():
    f = frequencies(TEXT)
    assert f["the"] == 3 and f["cat"] == 2 and f["bat"] == 1
    assert sum(f.values()) == 10 and len(f) == 7


def test_top_words_ranks_and_breaks_ties():
    assert top_words(TEXT, 3) == [("the", 3), ("cat", 2), ("a", 1)]
    assert top_words(TEXT, 0) == []
    assert len(top_words(TEXT, 100)) == 7


def test_average_sentence_length():
    assert average_sentence_length(TEXT) == 3.33
    assert average_sentence_length("") == 0.0
    assert average_sentence_length("one two. three") == 1.5
