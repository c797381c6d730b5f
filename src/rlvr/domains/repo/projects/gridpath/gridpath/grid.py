"""A rectangular grid map parsed from text: '#' walls, '.' floor, 'S' start, 'G' goal."""

MOVES = ((0, 1), (1, 0), (0, -1), (-1, 0))


class Grid:
    """Rows of cells; (row, col) coordinates with (0, 0) at the top left."""

    def __init__(self, rows):
        if not rows or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError("a grid needs equal, non-empty rows")
        self.rows = rows
        self.height = len(rows)
        self.width = len(rows[0])

    @classmethod
    def parse(cls, text):
        """A grid from text lines (blank lines ignored)."""
        return cls([line.strip() for line in text.splitlines() if line.strip()])

    def in_bounds(self, pos):
        r, c = pos
        return 0 <= r < self.height and 0 <= c < self.width

    def passable(self, pos):
        return self.in_bounds(pos) and self.rows[pos[0]][pos[1]] != "#"

    def find(self, mark):
        """Position of the first cell holding mark, scanning rows top to bottom, or None."""
        for r, row in enumerate(self.rows):
            c = row.find(mark)
            if c >= 0:
                return (r, c)
        return None

    def neighbours(self, pos):
        """Passable cells one step away (right, down, left, up)."""
        r, c = pos
        return [(r + dr, c + dc) for dr, dc in MOVES if self.passable((r + dr, c + dc))]
