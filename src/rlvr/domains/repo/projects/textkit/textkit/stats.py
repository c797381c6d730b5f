"""Word statistics."""
from textkit.tokenize import sentences, words


def frequencies(text):
    """Word -> count."""
    counts = {}
    for w in words(text):
        counts[w] = counts.get(w, 0) + 1
    return counts


def top_words(text, n):
    """The n most frequent words as (word, count), most frequent first, ties broken alphabetically."""
    ranked = sorted(frequencies(text).items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[:n]


def average_sentence_length(text):
    """Mean number of words per sentence, rounded to 2 places (0.0 for no sentences)."""
    sents = sentences(text)
    if not sents:
        return 0.0
    return round(sum(len(words(s)) for s in sents) / len(sents), 2)
