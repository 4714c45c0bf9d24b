"""A small SVG chart writer: scatter and line charts on log or linear axes, horizontal bars.

Everything is inline SVG text with labelled axes and ticks; no JavaScript, no fonts to fetch.
Labels are placed so that no two overlap (:mod:`mhaudit.render.html.labels`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mhaudit.render.escape import html as escape
from mhaudit.render.html.axes import Axis, Format, Frame, Ruler
from mhaudit.render.html.labels import Box, LabelLayout, short_labels, text_box, text_width

__all__ = ["PALETTE", "Axis", "Chart", "Format", "bar_chart", "legend_rows",
           "stacked_bar_chart"]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")

Draw = Callable[[Frame], list[str]]
"""A mark drawn once the frame is fixed: every pixel comes from the frame's rulers."""


def _svg(title: str, width: float, height: float, parts: Sequence[str]) -> str:
    body = "\n".join(parts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
            f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'font-family="sans-serif"><title>{escape(title)}</title>\n{body}\n</svg>')


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 11,
          extra: str = "", cls: str = "") -> str:
    tag = f'<text class="{cls}"' if cls else "<text"
    return (f'{tag} x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"'
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


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>" if text else ""


def _point_mark(a: float, b: float, color: str, ring: bool, name: str) -> str:
    if ring:
        return (f'<circle class="mark" cx="{a:.1f}" cy="{b:.1f}" r="8" fill="none" '
                f'stroke="{color}" stroke-width="2.5">{_title(name)}</circle>')
    return (f'<circle class="mark" cx="{a:.1f}" cy="{b:.1f}" r="5" fill="{color}" '
            f'fill-opacity="0.85" stroke="#fff">{_title(name)}</circle>')


def wrap(text: str, room: float) -> list[str]:
    """``text`` broken at spaces into lines no wider than ``room`` pixels (a word longer
    than that is cut with an ellipsis)."""
    keep = max(2, int(room / text_width("x")))
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= keep:
            lines[-1] += " " + word
        else:
            lines.append(word if len(word) <= keep else word[:keep - 1] + "…")
    return lines


@dataclass
class Chart:
    """An x/y chart: add series, then take ``svg()``. Marks are kept as drawings of the
    frame and placed only when the frame (legend band included) is fixed."""

    title: str
    x: Axis
    y: Axis
    width: int = 600
    height: int = 360
    marks: list[Draw] = field(default_factory=list)
    legend: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[tuple[float, float, str]] = field(default_factory=list)
    """Point labels (data x, data y, text), placed when the chart is drawn."""
    left: int = 96
    right: int = 20
    top: int = 34
    bottom: int = 52

    def line(self, xs: Sequence[float], ys: Sequence[float], label: str, color: str,
             dash: bool = False, markers: bool = True) -> None:
        """A polyline through the points, with round markers."""
        data = list(zip(xs, ys, strict=True))
        style = ' stroke-dasharray="6 4"' if dash else ""

        def draw(frame: Frame) -> list[str]:
            pts = [frame.px(x, y) for x, y in data]
            path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
            out = [f'<polyline class="series" points="{path}" fill="none" stroke="{color}" '
                   f'stroke-width="2"{style}>{_title(label)}</polyline>']
            if markers:
                out += [f'<circle class="mark" cx="{a:.1f}" cy="{b:.1f}" r="3.5" '
                        f'fill="{color}">{_title(label)}</circle>' for a, b in pts]
            return out

        self.marks.append(draw)
        if label:
            self.legend.append((label, color, "dash" if dash else "line"))

    def point(self, x: float, y: float, label: str, color: str, *, ring: bool = False,
              note: str = "") -> None:
        """One point; ``ring`` draws a hollow marker (the current layout); ``note`` is its
        own label, placed where it overlaps no other."""
        name = note or label
        self.marks.append(lambda frame: [_point_mark(*frame.px(x, y), color, ring, name)])
        if note:
            self.notes.append((x, y, note))
        if label and all(entry[0] != label for entry in self.legend):
            self.legend.append((label, color, "ring" if ring else "dot"))

    def vline(self, x: float, note: str, color: str = "#888") -> None:
        """A dashed vertical marker, its note placed with the point labels."""

        def draw(frame: Frame) -> list[str]:
            a = frame.x.px(x)
            return [f'<line class="vline" x1="{a:.1f}" y1="{frame.top:.1f}" x2="{a:.1f}" '
                    f'y2="{frame.bottom:.1f}" stroke="{color}" stroke-dasharray="3 3">'
                    f"{_title(note)}</line>"]

        self.marks.append(draw)
        self.notes.append((x, self.y.span()[0], note))

    def _axes(self, frame: Frame, height: float) -> list[str]:
        out = [f'<rect class="plot" x="{frame.left:.1f}" y="{frame.top:.1f}" '
               f'width="{frame.width:.1f}" height="{frame.height:.1f}" fill="#fcfcfc" '
               'stroke="#999"/>']
        for a, _, text in frame.x.ticks():
            out.append(f'<line x1="{a:.1f}" y1="{frame.top:.1f}" x2="{a:.1f}" '
                       f'y2="{frame.bottom:.1f}" stroke="#e4e4e4"/>')
            out.append(_text(a, frame.bottom + 18, text, anchor="middle", cls="tick-x"))
        for b, _, text in frame.y.ticks():
            out.append(f'<line x1="{frame.left:.1f}" y1="{b:.1f}" x2="{frame.right:.1f}" '
                       f'y2="{b:.1f}" stroke="#e4e4e4"/>')
            out.append(_text(frame.left - 6, b + 4, text, anchor="end", cls="tick-y"))
        out.append(_text(frame.left + frame.width / 2, height - 12, self.x.label,
                         anchor="middle", size=12))
        mid = frame.top + frame.height / 2
        out.append(_text(16, mid, self.y.label, anchor="middle", size=12,
                         extra=f' transform="rotate(-90 16 {mid:.0f})"'))
        out.append(_text(frame.left, 20, self.title, size=14, extra=' font-weight="bold"'))
        return out

    def _labels(self, frame: Frame, layout: LabelLayout) -> tuple[list[str], list[str]]:
        """The placed notes, and the ones no free spot was found for."""
        out: list[str] = []
        for x, y, _ in self.notes:
            a, b = frame.px(x, y)
            layout.reserve(Box(a - 6, b - 6, a + 6, b + 6))
        unplaced = []
        for x, y, note in self.notes:
            a, b = frame.px(x, y)
            spot = layout.place(a, b, note)
            if spot is None:
                unplaced.append(note)
                continue
            if spot.leader:
                out.append(f'<line x1="{a:.1f}" y1="{b:.1f}" x2="{spot.x:.1f}" '
                           f'y2="{spot.y - 4:.1f}" stroke="#bbb"/>')
            out.append(_text(spot.x, spot.y, note, anchor=spot.anchor, extra=' fill="#333"'))
        return out, unplaced

    def svg(self) -> str:
        """The chart as one ``<svg>`` element: the legend in a band above the plot, the
        frame fixed below it, then every mark drawn through the frame's rulers; labels
        with no free spot listed below the chart, wrapped to its width."""
        plot_w = self.width - self.left - self.right
        legend, boxes, band = legend_rows(self.legend, self.left, self.top - 6, plot_w)
        frame = Frame.of(self.left, self.top + int(band), plot_w,
                         self.height - self.top - self.bottom, self.x, self.y)
        height = self.height + int(band)
        layout = LabelLayout(Box(frame.left, frame.top, frame.right, frame.bottom))
        for box in boxes:
            layout.reserve(box)
        notes, unplaced = self._labels(frame, layout)
        lines = wrap("not labelled: " + "; ".join(unplaced), self.width - 24) if unplaced else []
        below = [_text(12, height + 14 * i + 4, line, extra=' fill="#555"')
                 for i, line in enumerate(lines)]
        parts = self._axes(frame, height) + [p for draw in self.marks for p in draw(frame)]
        return _svg(self.title, self.width, height + 14 * len(lines) + (6 if lines else 0),
                    parts + legend + notes + below)


def _labels(labels: list[str], room: float) -> list[str]:
    """Row labels cut from the middle to fit ``room`` pixels, alike ones kept apart."""
    return short_labels(labels, max(2, int(room / text_width("x"))))


def _row_label(x: float, y: float, label: str, short: str) -> str:
    """A row label right-aligned at ``x``; a cut one keeps its full name in a title."""
    text = _text(x, y, short, anchor="end")
    return text if short == label else text.replace("</text>", f"{_title(label)}</text>")


def _bar_axis(ruler: Ruler, top: float, bottom: float) -> list[str]:
    out = []
    for a, _, text in ruler.ticks():
        out.append(f'<line x1="{a:.1f}" y1="{top}" x2="{a:.1f}" y2="{bottom}" stroke="#e4e4e4"/>')
        out.append(_text(a, bottom + 15, text, anchor="middle", cls="tick-x"))
    return out


def _bar(x: float, y: float, w: float, height: float, color: str, name: str) -> str:
    return (f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{height}" '
            f'fill="{color}">{_title(name)}</rect>')


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
    ruler = Ruler(axis, left, width - 80)
    out = [_text(12, 20, title, size=14, extra=' font-weight="bold"')]
    bottom = top + row * len(items)
    out += _bar_axis(ruler, top, bottom)
    shorts = _labels([label for label, _, _ in items], left - 16)
    for i, (label, value, text) in enumerate(items):
        y = top + i * row
        out.append(_row_label(left - 6, y + 15, label, shorts[i]))
        if value > 0:
            end = max(left + 1.0, ruler.px(value))
            out.append(_bar(left, y + 4, end - left, row - 8, color, f"{label}: {text}"))
            out.append(_text(end + 4, y + 15, text))
        else:
            out.append(_text(left + 4, y + 15, text, extra=' fill="#777"'))
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>')
    out.append(_text((left + ruler.end) / 2, height - 10, axis_label, anchor="middle", size=12))
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
    ruler = Ruler(axis, left, width - 80)
    out = [_text(12, 20, title, size=14, extra=' font-weight="bold"'), *legend]
    bottom = top + row * len(rows)
    out += _bar_axis(ruler, top, bottom)
    shorts = _labels([label for label, _ in rows], left - 16)
    for i, ((label, parts), total) in enumerate(zip(rows, totals, strict=True)):
        y, sum_before = top + i * row, 0.0
        out.append(_row_label(left - 6, y + 17, label, shorts[i]))
        for name, value in parts:
            # each part spans from the sum before it to the sum after it, both on the ruler
            x0, x1 = ruler.px(sum_before), ruler.px(sum_before + max(value, 0.0))
            out.append(_bar(x0, y + 4, x1 - x0, row - 8, colors[name],
                            f"{name}: {fmt(value)}"))
            sum_before += max(value, 0.0)
        out.append(_text(ruler.px(sum_before) + 4, y + 17, fmt(total)))
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>')
    out.append(_text((left + ruler.end) / 2, height - 10, axis_label, anchor="middle", size=12))
    return _svg(title, width, height, out)
