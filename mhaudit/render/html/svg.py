"""A small SVG chart writer: scatter and line charts on log or linear axes, horizontal bars.

Everything is inline SVG text with labelled axes and ticks; no JavaScript, no fonts to fetch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mhaudit.render.escape import html as escape

Format = Callable[[float], str]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")


def _plain(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Axis:
    """One axis: its label (with units), range, scale and tick format."""

    label: str
    lo: float
    hi: float
    log: bool = True
    fmt: Format = _plain
    base: int = 10

    def span(self) -> tuple[float, float]:
        """The range padded to whole ticks (decades on a log axis)."""
        if self.log:
            lo, hi = max(self.lo, 1e-300), max(self.hi, self.lo * self.base, 1e-300)
            b = self.base
            return b ** math.floor(math.log(lo, b) + 1e-9), b ** math.ceil(math.log(hi, b) - 1e-9)
        lo, hi = min(self.lo, 0.0), self.hi if self.hi > self.lo else self.lo + 1
        return lo, hi * 1.05

    def ticks(self) -> list[float]:
        lo, hi = self.span()
        if self.log:
            b = self.base
            first, last = round(math.log(lo, b)), round(math.log(hi, b))
            every = max(1, math.ceil((last - first) / 8))
            return [float(b**k) for k in range(first, last + 1, every)]
        raw = (hi - lo) / 5
        mag = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
        return [lo + i * step for i in range(int((hi - lo) / step) + 1)]

    def scale(self, value: float, length: float) -> float:
        """Position of ``value`` along an axis of ``length`` pixels."""
        lo, hi = self.span()
        if self.log:
            value = max(value, lo)
            return length * (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return length * (value - lo) / (hi - lo)


@dataclass
class Chart:
    """An x/y chart: add series, then take ``svg()``."""

    title: str
    x: Axis
    y: Axis
    width: int = 600
    height: int = 360
    parts: list[str] = field(default_factory=list)
    legend: list[tuple[str, str, str]] = field(default_factory=list)
    left: int = 96
    right: int = 20
    top: int = 34
    bottom: int = 52

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    def px(self, x: float, y: float) -> tuple[float, float]:
        """Pixel position of a data point."""
        return (self.left + self.x.scale(x, self.plot_w),
                self.top + self.plot_h - self.y.scale(y, self.plot_h))

    def line(self, xs: Sequence[float], ys: Sequence[float], label: str, color: str,
             dash: bool = False, markers: bool = True) -> None:
        """A polyline through the points, with round markers."""
        pts = [self.px(x, y) for x, y in zip(xs, ys, strict=True)]
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        style = ' stroke-dasharray="6 4"' if dash else ""
        self.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                          f'stroke-width="2"{style}/>')
        if markers:
            self.parts += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{color}"/>'
                           for a, b in pts]
        self.legend.append((label, color, "dash" if dash else "line"))

    def point(self, x: float, y: float, label: str, color: str, *, ring: bool = False,
              note: str = "") -> None:
        """One labelled point; ``ring`` draws a hollow marker (the current layout)."""
        a, b = self.px(x, y)
        if ring:
            self.parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="8" fill="none" '
                              f'stroke="{color}" stroke-width="2.5"/>')
        else:
            self.parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="5" fill="{color}" '
                              f'fill-opacity="0.85" stroke="#fff"/>')
        if note:
            anchor = "end" if a > self.left + 0.75 * self.plot_w else "start"
            dx = -9 if anchor == "end" else 9
            self.parts.append(f'<text x="{a + dx:.1f}" y="{b - 8:.1f}" font-size="11" '
                              f'text-anchor="{anchor}" fill="#333">{escape(note)}</text>')
        if label and all(entry[0] != label for entry in self.legend):
            self.legend.append((label, color, "ring" if ring else "dot"))

    def vline(self, x: float, note: str, color: str = "#888") -> None:
        """A dashed vertical marker with a note at the top."""
        a, _ = self.px(x, self.y.span()[0])
        self.parts.append(f'<line x1="{a:.1f}" y1="{self.top}" x2="{a:.1f}" '
                          f'y2="{self.top + self.plot_h}" stroke="{color}" '
                          'stroke-dasharray="3 3"/>')
        self.parts.append(f'<text x="{a + 4:.1f}" y="{self.top + self.plot_h - 8:.1f}" '
                          f'font-size="11" fill="{color}">{escape(note)}</text>')

    def _axes(self) -> list[str]:
        out = [f'<rect x="{self.left}" y="{self.top}" width="{self.plot_w:.0f}" '
               f'height="{self.plot_h:.0f}" fill="#fcfcfc" stroke="#999"/>']
        bottom = self.top + self.plot_h
        for t in self.x.ticks():
            a = self.left + self.x.scale(t, self.plot_w)
            out.append(f'<line x1="{a:.1f}" y1="{self.top}" x2="{a:.1f}" y2="{bottom}" '
                       'stroke="#e4e4e4"/>')
            out.append(f'<text x="{a:.1f}" y="{bottom + 16}" font-size="11" '
                       f'text-anchor="middle">{escape(self.x.fmt(t))}</text>')
        for t in self.y.ticks():
            b = bottom - self.y.scale(t, self.plot_h)
            out.append(f'<line x1="{self.left}" y1="{b:.1f}" x2="{self.left + self.plot_w:.0f}" '
                       f'y2="{b:.1f}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{self.left - 6}" y="{b + 4:.1f}" font-size="11" '
                       f'text-anchor="end">{escape(self.y.fmt(t))}</text>')
        out.append(f'<text x="{self.left + self.plot_w / 2:.0f}" y="{self.height - 12}" '
                   f'font-size="12" text-anchor="middle">{escape(self.x.label)}</text>')
        mid = self.top + self.plot_h / 2
        out.append(f'<text x="16" y="{mid:.0f}" font-size="12" text-anchor="middle" '
                   f'transform="rotate(-90 16 {mid:.0f})">{escape(self.y.label)}</text>')
        out.append(f'<text x="{self.left}" y="20" font-size="14" font-weight="bold">'
                   f'{escape(self.title)}</text>')
        return out

    def _legend(self) -> list[str]:
        out, y = [], self.top + 14
        width = max((len(label) for label, _, _ in self.legend), default=0) * 6 + 30
        x = self.left + width
        for label, color, kind in self.legend:
            if kind == "ring":
                mark = f'<circle cx="{x - 8}" cy="{y - 4}" r="5" fill="none" stroke="{color}" ' \
                       'stroke-width="2"/>'
            elif kind == "dot":
                mark = f'<circle cx="{x - 8}" cy="{y - 4}" r="4" fill="{color}"/>'
            else:
                dash = ' stroke-dasharray="4 3"' if kind == "dash" else ""
                mark = (f'<line x1="{x - 16}" y1="{y - 4}" x2="{x}" y2="{y - 4}" '
                        f'stroke="{color}" stroke-width="2"{dash}/>')
            out.append(mark + f'<text x="{x - 22}" y="{y}" font-size="11" text-anchor="end">'
                       f'{escape(label)}</text>')
            y += 16
        return out

    def svg(self) -> str:
        """The chart as one ``<svg>`` element."""
        body = "\n".join(self._axes() + self.parts + self._legend())
        return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
                f'width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" font-family="sans-serif">'
                f'<title>{escape(self.title)}</title>\n{body}\n</svg>')


def bar_chart(title: str, items: Sequence[tuple[str, float, str]], axis_label: str,
              fmt: Format, *, log: bool = True, color: str = PALETTE[0],
              width: int = 600, base: int = 10) -> str:
    """Horizontal bars, one per ``(label, value, value text)``; zero values are listed as such."""
    row, left, top = 22, 170, 34
    height = top + row * max(1, len(items)) + 46
    positive = [v for _, v, _ in items if v > 0] or [1.0]
    axis = Axis(axis_label, min(positive) / 2, max(positive), log=log, fmt=fmt, base=base)
    plot_w = width - left - 90
    lo, _ = axis.span()
    out = [f'<text x="{left}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    bottom = top + row * len(items)
    for t in axis.ticks():
        a = left + axis.scale(t, plot_w)
        out.append(f'<line x1="{a:.1f}" y1="{top}" x2="{a:.1f}" y2="{bottom}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{a:.1f}" y="{bottom + 15}" font-size="11" '
                   f'text-anchor="middle">{escape(fmt(t))}</text>')
    for i, (label, value, text) in enumerate(items):
        y = top + i * row
        out.append(f'<text x="{left - 6}" y="{y + 15}" font-size="11" text-anchor="end">'
                   f'{escape(label[-28:])}</text>')
        if value > 0:
            w = max(1.0, axis.scale(value, plot_w)) if value > lo else 1.0
            out.append(f'<rect x="{left}" y="{y + 4}" width="{w:.1f}" height="{row - 8}" '
                       f'fill="{color}"/>')
            out.append(f'<text x="{left + w + 4:.1f}" y="{y + 15}" font-size="11">'
                       f'{escape(text)}</text>')
        else:
            out.append(f'<text x="{left + 4}" y="{y + 15}" font-size="11" fill="#777">'
                       f'{escape(text)}</text>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>')
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 10}" font-size="12" '
               f'text-anchor="middle">{escape(axis_label)}</text>')
    body = "\n".join(out)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">'
            f'<title>{escape(title)}</title>\n{body}\n</svg>')
