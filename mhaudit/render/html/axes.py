"""Chart axes: the range and ticks of a value axis, and the one mapping from a value to a pixel.

Every mark, tick and grid line of a chart is placed through a :class:`Ruler`, made once the
chart's frame (legend band included) is fixed, so a mark cannot stand apart from its axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Format = Callable[[float], str]


def _plain(value: float) -> str:
    return f"{value:g}"


def _step(raw: float, binary: bool) -> float:
    """A tick step of at least ``raw``: 1, 2, 2.5 or 5 times a power of ten, or on a byte
    axis a power of two times B, KiB, MiB or GiB (ticks read 256 MiB, 512 MiB, 768 MiB)."""
    if raw <= 0:
        return 1.0
    if binary:
        unit = 1024.0 ** max(0, math.floor(math.log(raw, 1024) + 1e-9))
        return unit * 2.0 ** math.ceil(math.log2(raw / unit) - 1e-9)
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))


@dataclass(frozen=True)
class Axis:
    """One axis: its label (with units), range, scale and tick format."""

    label: str
    lo: float
    hi: float
    log: bool = True
    fmt: Format = _plain
    base: int = 10
    binary: bool = False
    """Linear ticks at round multiples of KiB, MiB, GiB (a byte axis)."""

    def _linear_step(self) -> float:
        hi = self.hi if self.hi > min(self.lo, 0.0) else min(self.lo, 0.0) + 1
        return _step((hi - min(self.lo, 0.0)) / 5, self.binary)

    def span(self) -> tuple[float, float]:
        """The range padded to whole ticks (decades on a log axis, steps on a linear one,
        which starts at zero)."""
        if self.log:
            lo, hi = max(self.lo, 1e-300), max(self.hi, self.lo * self.base, 1e-300)
            b = self.base
            return b ** math.floor(math.log(lo, b) + 1e-9), b ** math.ceil(math.log(hi, b) - 1e-9)
        lo, step = min(self.lo, 0.0), self._linear_step()
        hi = max(self.hi, lo + step)
        return lo, lo + step * math.ceil((hi - lo) / step - 1e-9)

    def ticks(self) -> list[float]:
        lo, hi = self.span()
        if self.log:
            b = self.base
            first, last = round(math.log(lo, b)), round(math.log(hi, b))
            every = max(1, math.ceil((last - first) / 8))
            return [float(b**k) for k in range(first, last + 1, every)]
        step = self._linear_step()
        return [lo + i * step for i in range(round((hi - lo) / step) + 1)]

    def fraction(self, value: float) -> float:
        """Where ``value`` lies along the span, 0 at its low end and 1 at its high end."""
        lo, hi = self.span()
        if self.log:
            value = max(value, lo)
            return (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return (value - lo) / (hi - lo)


@dataclass(frozen=True)
class Ruler:
    """An axis laid on the page: the span's low end at pixel ``start``, its high end at
    ``end`` (``end < start`` for a vertical axis, whose values grow upwards)."""

    axis: Axis
    start: float
    end: float

    def px(self, value: float) -> float:
        """The pixel of ``value``: the one mapping marks, ticks and grid lines all use."""
        return self.start + (self.end - self.start) * self.axis.fraction(value)

    def length(self, value: float) -> float:
        """Pixels from the span's low end to ``value`` (a bar's width)."""
        return abs(self.px(value) - self.start)

    def ticks(self) -> list[tuple[float, float, str]]:
        """Each tick as ``(pixel, value, label)``."""
        return [(self.px(t), t, self.axis.fmt(t)) for t in self.axis.ticks()]


@dataclass(frozen=True)
class Frame:
    """The plot area of one chart, fixed once its legend band is known, and its two rulers."""

    left: float
    top: float
    width: float
    height: float
    x: Ruler
    y: Ruler

    @classmethod
    def of(cls, left: float, top: float, width: float, height: float, x: Axis,
           y: Axis) -> Frame:
        return cls(left, top, width, height, Ruler(x, left, left + width),
                   Ruler(y, top + height, top))

    @property
    def bottom(self) -> float:
        return self.top + self.height

    @property
    def right(self) -> float:
        return self.left + self.width

    def px(self, x: float, y: float) -> tuple[float, float]:
        """Pixel position of a data point."""
        return self.x.px(x), self.y.px(y)
