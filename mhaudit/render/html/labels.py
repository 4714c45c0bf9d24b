"""Placing chart labels so that no two overlap: boxes kept, candidate spots tried in turn."""

from __future__ import annotations

from dataclasses import dataclass, field

CHAR_W = 6.6
"""Width of one character of 11 px sans-serif, rounded up (digits and lower case)."""
LINE_H = 13.0
"""Height of one line of 11 px text."""


def text_width(text: str, size: float = 11) -> float:
    """Estimated width in pixels of ``text`` at ``size`` px: an upper bound for sans-serif."""
    return len(text) * CHAR_W * size / 11


def short_label(label: str, keep: int) -> str:
    """``label`` in at most ``keep`` characters, cut from the middle: a dotted name keeps
    its first part and as many whole parts of its tail as fit (``model.….3.self_attn``),
    anything else its start and a longer end."""
    if len(label) <= keep:
        return label
    parts = label.split(".")
    for k in range(len(parts) - 2, 0, -1):
        dotted = f"{parts[0]}.….{'.'.join(parts[-k:])}"
        if len(dotted) <= keep:
            return dotted
    tail = max(1, (2 * keep) // 3)
    head = max(0, keep - 1 - tail)
    return label[:head] + "…" + label[len(label) - tail:]


def short_labels(labels: list[str], keep: int) -> list[str]:
    """Each label as :func:`short_label` cuts it, where two different labels would read
    alike the end kept instead (``…ers.11.self_attn``), which tells layers apart."""
    short = [short_label(label, keep) for label in labels]
    alike = [any(s == short[i] and other != label for other, s in zip(labels, short, strict=True))
             for i, label in enumerate(labels)]
    return [("…" + label[len(label) - keep + 1:] if len(label) > keep else label) if clash
            else cut for label, cut, clash in zip(labels, short, alike, strict=True)]


@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle in SVG pixels."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return (self.x0 < other.x1 and other.x0 < self.x1
                and self.y0 < other.y1 and other.y0 < self.y1)


def text_box(x: float, y: float, text: str, anchor: str = "start", size: float = 11) -> Box:
    """The box of a text drawn at baseline ``(x, y)`` with ``text-anchor`` ``anchor``."""
    w = text_width(text, size)
    left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
    return Box(left, y - size, left + w, y + size * 0.3)


@dataclass
class Placed:
    """A label placed: where its text goes and where its leader line starts."""

    x: float
    y: float
    anchor: str
    leader: bool


@dataclass
class LabelLayout:
    """The boxes already taken in one chart and the area labels must stay inside."""

    area: Box
    taken: list[Box] = field(default_factory=list)

    def reserve(self, box: Box) -> None:
        """Mark ``box`` (a tick label, the legend, a marker) as taken."""
        self.taken.append(box)

    def _free(self, box: Box) -> bool:
        inside = (box.x0 >= self.area.x0 and box.x1 <= self.area.x1
                  and box.y0 >= self.area.y0 and box.y1 <= self.area.y1)
        return inside and not any(box.overlaps(t) for t in self.taken)

    def place(self, x: float, y: float, text: str) -> Placed | None:
        """A spot for ``text`` near the point ``(x, y)`` that overlaps nothing taken:
        beside it first, then further away (with a leader line); None when none is free."""
        for step in range(0, 12):
            rise = 8 + step * LINE_H
            lead = step > 0
            for dy in (-rise, rise + LINE_H * 0.6):
                for anchor, dx in (("start", 9), ("end", -9)):
                    box = text_box(x + dx, y + dy, text, anchor)
                    if self._free(box):
                        self.taken.append(box)
                        return Placed(x + dx, y + dy, anchor, lead)
        return None
