"""Small text utilities: tokenising, word statistics and wrapping."""
