"""A point in the plane."""

import math


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"

    def __eq__(self, other):
        if not isinstance(other, Point):
            return NotImplemented
        return self.x == other.x and self.y == other.y

    def distance(self, other):
        """The straight-line distance to another point."""
        return math.hypot(self.x - other.x, self.y - other.y)
