"""Money amounts as integer cents: parsing and formatting."""


def parse_amount(text):
    """Parse '12.34', '-5', '1,234.5' or '(7.00)' (negative) into integer cents."""
    s = text.strip().replace(",", "")
    negative = False
    if s.startswith("(") and s.endswith(")"):
        negative = True
        s = s[1:-1]
    if s.startswith("-"):
        negative = not negative
        s = s[1:]
    whole, _, frac = s.partition(".")
    if not whole.isdigit() or (frac and not frac.isdigit()) or len(frac) > 2:
        raise ValueError(f"not an amount: {text!r}")
    cents = int(whole) * 100 + int(frac.ljust(2, "0") or 0)
    return -cents if negative else cents


def format_amount(cents):
    """Format integer cents as '1,234.50' ('-' in front of negative amounts)."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{frac:02d}"


def split_evenly(cents, parts):
    """Split an amount into `parts` shares that differ by at most one cent and sum to the amount."""
    if parts <= 0:
        raise ValueError("parts must be positive")
    base, extra = divmod(cents, parts)
    return [base + 1 if i < extra else base for i in range(parts)]
