"""Split text into words and sentences."""

SENTENCE_END = ".!?"


def words(text):
    """Lower-cased words: runs of letters, digits and apostrophes; everything else separates."""
    out = []
    cur = []
    for ch in text:
        if ch.isalnum() or ch == "'":
            cur.append(ch.lower())
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def sentences(text):
    """Sentences ending in '.', '!' or '?' (the mark kept), stripped; a trailing fragment counts too."""
    out = []
    start = 0
    for i, ch in enumerate(text):
        if ch in SENTENCE_END:
            piece = text[start:i + 1].strip()
            if len(piece) > 1:
                out.append(piece)
            start = i + 1
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out
