"""Greedy line wrapping and centring."""


def wrap(text, width):
    """Wrap the words of text into lines of at most width characters (a longer word gets a line of its own)."""
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    line = ""
    for word in text.split():
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line = line + " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def center(line, width, fill=" "):
    """Centre a line in width characters; an odd remainder goes to the right."""
    if len(line) >= width:
        return line
    left = (width - len(line)) // 2
    right = width - len(line) - left
    return fill * left + line + fill * right
