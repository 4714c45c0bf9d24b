"""A small SVG chart writer: scatter and line charts on log or linear axes, horizontal bars.

Everything is inline SVG text with labelled axes and ticks; no JavaScript, no fonts to fetch.
Labels are placed so that no two overlap (:mod:`mhaudit.render.html.labels`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mhaudit.render.escape import html as escape
from mhaudit.render.html.labels import Box, LabelLayout, text_box, text_width

Format = Callable[[float], str]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")


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

    def scale(self, value: float, length: float) -> float:
        """Position of ``value`` along an axis of ``length`` pixels."""
        lo, hi = self.span()
        if self.log:
            value = max(value, lo)
            return length * (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return length * (value - lo) / (hi - lo)


def _svg(title: str, width: float, height: float, parts: Sequence[str]) -> str:
    body = "\n".join(parts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
            f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'font-family="sans-serif"><title>{escape(title)}</title>\n{body}\n</svg>')


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 11,
          extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"'
            f'{extra}>{escape(text)}</text>')


def _mark(kind: str, x: float, y: float, color: str) -> str:
    if kind == "ring":
        return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="none" stroke="{color}" '
                'stroke-width="2"/>')
    if kind == "dot":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>'
    if kind == "box":
        return f'<rect x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" fill="{color}"/>'
    dash = ' stroke-dasharray="4 3"' if kind == "dash" else ""
    return (f'<line x1="{x - 8:.1f}" y1="{y:.1f}" x2="{x + 8:.1f}" y2="{y:.1f}" '
            f'stroke="{color}" stroke-width="2"{dash}/>')


def legend_rows(entries: Sequence[tuple[str, str, str]], left: float, top: float,
                width: float) -> tuple[list[str], list[Box], float]:
    """Legend entries ``(label, colour, mark kind)`` laid out in rows from ``(left, top)``;
    returns the SVG parts, the text boxes and the height used."""
    parts: list[str] = []
    boxes: list[Box] = []
    x, y = left, top + 12
    for label, color, kind in entries:
        w = 22 + text_width(label) + 14
        if x > left and x + w > left + width:
            x, y = left, y + 16
        parts.append(_mark(kind, x + 8, y - 4, color))
        parts.append(_text(x + 20, y, label))
        boxes.append(text_box(x + 20, y, label))
        x += w
    return parts, boxes, (y - top + 6) if entries else 0.0


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
    notes: list[tuple[float, float, str]] = field(default_factory=list)
    """Point labels (data x, data y, text), placed when the chart is drawn."""
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
        if label:
            self.legend.append((label, color, "dash" if dash else "line"))

    def point(self, x: float, y: float, label: str, color: str, *, ring: bool = False,
              note: str = "") -> None:
        """One point; ``ring`` draws a hollow marker (the current layout); ``note`` is its
        own label, placed where it overlaps no other."""
        a, b = self.px(x, y)
        if ring:
            self.parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="8" fill="none" '
                              f'stroke="{color}" stroke-width="2.5"/>')
        else:
            self.parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="5" fill="{color}" '
                              f'fill-opacity="0.85" stroke="#fff"/>')
        if note:
            self.notes.append((x, y, note))
        if label and all(entry[0] != label for entry in self.legend):
            self.legend.append((label, color, "ring" if ring else "dot"))

    def vline(self, x: float, note: str, color: str = "#888") -> None:
        """A dashed vertical marker, its note placed with the point labels."""
        a, _ = self.px(x, self.y.span()[0])
        self.parts.append(f'<line x1="{a:.1f}" y1="{self.top}" x2="{a:.1f}" '
                          f'y2="{self.top + self.plot_h}" stroke="{color}" '
                          'stroke-dasharray="3 3"/>')
        self.notes.append((x, self.y.span()[0], note))

    def _axes(self, layout: LabelLayout) -> list[str]:
        out = [f'<rect x="{self.left}" y="{self.top}" width="{self.plot_w:.0f}" '
               f'height="{self.plot_h:.0f}" fill="#fcfcfc" stroke="#999"/>']
        bottom = self.top + self.plot_h
        for t in self.x.ticks():
            a = self.left + self.x.scale(t, self.plot_w)
            out.append(f'<line x1="{a:.1f}" y1="{self.top}" x2="{a:.1f}" y2="{bottom}" '
                       'stroke="#e4e4e4"/>')
            out.append(_text(a, bottom + 16, self.x.fmt(t), anchor="middle"))
        for t in self.y.ticks():
            b = bottom - self.y.scale(t, self.plot_h)
            out.append(f'<line x1="{self.left}" y1="{b:.1f}" x2="{self.left + self.plot_w:.0f}" '
                       f'y2="{b:.1f}" stroke="#e4e4e4"/>')
            out.append(_text(self.left - 6, b + 4, self.y.fmt(t), anchor="end"))
        out.append(_text(self.left + self.plot_w / 2, self.height - 12, self.x.label,
                         anchor="middle", size=12))
        mid = self.top + self.plot_h / 2
        out.append(_text(16, mid, self.y.label, anchor="middle", size=12,
                         extra=f' transform="rotate(-90 16 {mid:.0f})"'))
        out.append(_text(self.left, 20, self.title, size=14, extra=' font-weight="bold"'))
        return out

    def _labels(self, layout: LabelLayout) -> list[str]:
        out: list[str] = []
        for x, y, _ in self.notes:
            a, b = self.px(x, y)
            layout.reserve(Box(a - 6, b - 6, a + 6, b + 6))
        unplaced = []
        for x, y, note in self.notes:
            a, b = self.px(x, y)
            spot = layout.place(a, b, note)
            if spot is None:
                unplaced.append(note)
                continue
            if spot.leader:
                out.append(f'<line x1="{a:.1f}" y1="{b:.1f}" x2="{spot.x:.1f}" '
                           f'y2="{spot.y - 4:.1f}" stroke="#bbb"/>')
            out.append(_text(spot.x, spot.y, note, anchor=spot.anchor, extra=' fill="#333"'))
        if unplaced:
            out.append(_text(self.left, self.height - 30, "not labelled: " + "; ".join(unplaced),
                             extra=' fill="#555"'))
        return out

    def svg(self) -> str:
        """The chart as one ``<svg>`` element: the legend in a band above the plot."""
        legend, boxes, band = legend_rows(self.legend, self.left, self.top - 6, self.plot_w)
        self.top += int(band)
        self.height += int(band)
        layout = LabelLayout(Box(self.left, self.top, self.left + self.plot_w,
                                 self.top + self.plot_h))
        for box in boxes:
            layout.reserve(box)
        parts = self._axes(layout) + self.parts + legend + self._labels(layout)
        return _svg(self.title, self.width, self.height, parts)


def _short(label: str, room: float) -> str:
    """``label`` cut from the left with an ellipsis to fit ``room`` pixels."""
    keep = int(room / text_width("x"))
    return label if len(label) <= keep else "…" + label[-(keep - 1):]


def bar_chart(title: str, items: Sequence[tuple[str, float, str]], axis_label: str,
              fmt: Format, *, log: bool = False, color: str = PALETTE[0],
              width: int = 600, base: int = 10, binary: bool = False) -> str:
    """Horizontal bars on a linear axis from zero, one per ``(label, value, value text)``;
    zero values are listed as such."""
    row, left, top = 22, 230, 34
    height = top + row * max(1, len(items)) + 46
    positive = [v for _, v, _ in items if v > 0] or [1.0]
    axis = Axis(axis_label, min(positive) / 2 if log else 0.0, max(positive), log=log,
                fmt=fmt, base=base, binary=binary)
    plot_w = width - left - 80
    out = [_text(12, 20, title, size=14, extra=' font-weight="bold"')]
    bottom = top + row * len(items)
    for t in axis.ticks():
        a = left + axis.scale(t, plot_w)
        out.append(f'<line x1="{a:.1f}" y1="{top}" x2="{a:.1f}" y2="{bottom}" stroke="#e4e4e4"/>')
        out.append(_text(a, bottom + 15, fmt(t), anchor="middle"))
    for i, (label, value, text) in enumerate(items):
        y = top + i * row
        out.append(_text(left - 6, y + 15, _short(label, left - 16), anchor="end"))
        if value > 0:
            w = max(1.0, axis.scale(value, plot_w))
            out.append(f'<rect x="{left}" y="{y + 4}" width="{w:.1f}" height="{row - 8}" '
                       f'fill="{color}"/>')
            out.append(_text(left + w + 4, y + 15, text))
        else:
            out.append(_text(left + 4, y + 15, text, extra=' fill="#777"'))
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>')
    out.append(_text(left + plot_w / 2, height - 10, axis_label, anchor="middle", size=12))
    return _svg(title, width, height, out)


def stacked_bar_chart(title: str, rows: Sequence[tuple[str, Sequence[tuple[str, float]]]],
                      axis_label: str, fmt: Format, *, width: int = 600,
                      binary: bool = True) -> str:
    """One horizontal bar per row, split into its parts (same colour for the same part
    name in every row), the row's total at its end; the legend names the parts (with
    their values when there is one row)."""
    names = list(dict.fromkeys(name for _, parts in rows for name, _ in parts))
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    single = rows[0][1] if len(rows) == 1 else ()
    entries = [(f"{name} {fmt(dict(single)[name])}" if single else name, colors[name], "box")
               for name in names]
    left, row = 150, 26
    legend, _, band = legend_rows(entries, 12, 28, width - 24)
    top = 34 + band
    height = top + row * len(rows) + 46
    totals = [sum(v for _, v in parts) for _, parts in rows]
    axis = Axis(axis_label, 0.0, max([*totals, 1.0]), log=False, fmt=fmt, binary=binary)
    plot_w = width - left - 80
    out = [_text(12, 20, title, size=14, extra=' font-weight="bold"'), *legend]
    bottom = top + row * len(rows)
    for t in axis.ticks():
        a = left + axis.scale(t, plot_w)
        out.append(f'<line x1="{a:.1f}" y1="{top}" x2="{a:.1f}" y2="{bottom}" stroke="#e4e4e4"/>')
        out.append(_text(a, bottom + 15, fmt(t), anchor="middle"))
    for i, ((label, parts), total) in enumerate(zip(rows, totals, strict=True)):
        y, x = top + i * row, float(left)
        out.append(_text(left - 6, y + 17, _short(label, left - 16), anchor="end"))
        for name, value in parts:
            w = axis.scale(value, plot_w) if value > 0 else 0.0
            out.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{row - 8}" '
                       f'fill="{colors[name]}"><title>{escape(name)}: {escape(fmt(value))}'
                       '</title></rect>')
            x += w
        out.append(_text(x + 4, y + 17, fmt(total)))
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>')
    out.append(_text(left + plot_w / 2, height - 10, axis_label, anchor="middle", size=12))
    return _svg(title, width, height, out)
