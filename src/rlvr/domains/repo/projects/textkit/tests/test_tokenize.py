from textkit.tokenize import sentences, words


def test_words():
    assert words("Hello, world! It's 2 o'clock.") == ["hello", "world", "it's", "2", "o'clock"]
    assert words("") == []
    assert words("--a--b") == ["a", "b"]
    assert words("end") == ["end"]


def test_sentences():
    assert sentences("One. Two! Three? four") == ["One.", "Two!", "Three?", "four"]
    assert sentences("Wait... what?") == ["Wait.", "what?"]
    assert sentences("   ") == []
    assert sentences("A.") == ["A."]
