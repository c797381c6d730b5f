"""Grid maps and shortest paths on them."""
