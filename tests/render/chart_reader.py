"""Reading an HTML chart back as its reader would: each axis from its own tick labels, each
mark through that axis to a value.

Shares nothing with the drawing code: tick labels are parsed from their text, the scale
(linear or log) is told from the ticks' spacing, and a pixel is mapped to a value by the two
outermost ticks alone.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

NS = "{http://www.w3.org/2000/svg}"
TOLERANCE_PX = 1.0

DECIMAL = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
BINARY = {"B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}
TIME = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def read_number(text: str) -> float:
    """The value a tick label states: ``20 MFLOP``, ``256 MiB``, ``27.9 µs``, ``4,096``,
    ``50 %``, ``1 PFLOP/s``."""
    m = re.fullmatch(r"(-?[\d,]*\.?\d+(?:e[+-]?\d+)?)\s*(\S*)", text.strip())
    assert m, f"tick label {text!r} is not a number"
    number, unit = float(m[1].replace(",", "")), m[2]
    if unit in BINARY:
        return number * BINARY[unit]
    if unit in TIME:
        return number * TIME[unit]
    if unit in ("", "%"):
        return number
    for name in ("FLOP/s", "FLOP"):
        if unit.endswith(name) and unit[: -len(name)] in DECIMAL:
            return number * DECIMAL[unit[: -len(name)]]
    raise AssertionError(f"tick label {text!r} has an unknown unit")


@dataclass(frozen=True)
class Scale:
    """An axis as its ticks state it: two (pixel, value) anchors and linear or log."""

    p0: float
    v0: float
    p1: float
    v1: float
    log: bool

    def _f(self, value: float) -> float:
        return math.log(value) if self.log else value

    def px(self, value: float) -> float:
        if self.log and value <= 0:
            return math.nan
        t = (self._f(value) - self._f(self.v0)) / (self._f(self.v1) - self._f(self.v0))
        return self.p0 + t * (self.p1 - self.p0)

    def value(self, px: float) -> float:
        t = (px - self.p0) / (self.p1 - self.p0)
        f = self._f(self.v0) + t * (self._f(self.v1) - self._f(self.v0))
        return math.exp(f) if self.log else f


def fit(ticks: list[tuple[float, float]], label: str) -> Scale:
    """The scale through ``(pixel, value)`` ticks: linear when they fit a line within a
    pixel, else log (which they must then fit); two ticks decide by the axis label."""
    ticks = sorted(set(ticks))
    assert len(ticks) >= 2, f"axis {label!r} has fewer than two ticks"
    (p0, v0), (p1, v1) = ticks[0], ticks[-1]
    kinds = [False, True] if len(ticks) > 2 or "log" not in label else [True]
    for log in kinds:
        if log and min(v for _, v in ticks) <= 0:
            continue
        scale = Scale(p0, v0, p1, v1, log)
        if all(abs(scale.px(v) - p) <= 0.5 for p, v in ticks):
            return scale
    raise AssertionError(f"ticks of {label!r} fit neither a linear nor a log axis: {ticks}")


@dataclass
class Read:
    """One chart read back: its axes, marks and bars, in pixels."""

    title: str
    x: Scale
    y: Scale | None
    plot: tuple[float, float, float, float]
    """x0, y0, x1, y1 of the plot area."""
    marks: list[tuple[float, float, str]]
    """Every round mark: centre and its title."""
    vertices: list[tuple[float, float, str]]
    """Every vertex of every line, with the line's title."""
    vlines: list[float]
    bars: list[tuple[float, float, float, str]]
    """Every bar: y, left, right, title."""


def _title(node: ET.Element) -> str:
    t = node.find(f"{NS}title")
    return t.text or "" if t is not None else ""


def _grid(root: ET.Element) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for line in root.iter(f"{NS}line"):
        if line.get("stroke") != "#e4e4e4":
            continue
        x1, x2, y1 = (float(line.get(k, "0")) for k in ("x1", "x2", "y1"))
        (xs if x1 == x2 else ys).append(x1 if x1 == x2 else y1)
    return xs, ys


def _axis(root: ET.Element, cls: str, grid: list[float], label: str) -> Scale | None:
    """Each tick label at the grid line nearest it (the label itself sits off the line)."""
    texts = [t for t in root.iter(f"{NS}text") if t.get("class") == cls]
    if not texts:
        return None
    coord = "x" if cls == "tick-x" else "y"
    ticks = []
    for t in texts:
        at = float(t.get(coord, "0"))
        line = min(grid, key=lambda g: abs(g - at))
        assert abs(line - at) <= 8, f"tick {t.text!r} stands apart from every grid line"
        ticks.append((line, read_number(t.text or "")))
    return fit(ticks, label)


def read_chart(svg: str) -> Read:
    """The chart in ``svg`` as its reader sees it."""
    root = ET.fromstring(svg)
    title = _title(root)
    texts = [t for t in root.iter(f"{NS}text") if t.get("font-size") == "12"]
    y_label = next((t.text or "" for t in texts if "rotate" in t.get("transform", "")), "")
    x_label = next((t.text or "" for t in texts if "rotate" not in t.get("transform", "")), "")
    gx, gy = _grid(root)
    x = _axis(root, "tick-x", gx, x_label)
    assert x is not None, f"{title}: no x ticks"
    y = _axis(root, "tick-y", gy, y_label)
    plot_rect = next((r for r in root.iter(f"{NS}rect") if r.get("class") == "plot"), None)
    if plot_rect is not None:
        x0, y0 = float(plot_rect.get("x", "0")), float(plot_rect.get("y", "0"))
        plot = (x0, y0, x0 + float(plot_rect.get("width", "0")),
                y0 + float(plot_rect.get("height", "0")))
    else:  # a bar chart: the span of its ticks
        plot = (min(gx), -math.inf, max(gx), math.inf)
    marks = [(float(c.get("cx", "0")), float(c.get("cy", "0")), _title(c))
             for c in root.iter(f"{NS}circle") if c.get("class") == "mark"]
    vertices = [(float(a), float(b), _title(p)) for p in root.iter(f"{NS}polyline")
                if p.get("class") == "series"
                for a, b in (pt.split(",") for pt in (p.get("points") or "").split())]
    vlines = [float(v.get("x1", "0")) for v in root.iter(f"{NS}line") if v.get("class") == "vline"]
    bars = [(float(r.get("y", "0")), float(r.get("x", "0")),
             float(r.get("x", "0")) + float(r.get("width", "0")), _title(r))
            for r in root.iter(f"{NS}rect") if r.get("class") == "bar"]
    return Read(title, x, y, plot, marks, vertices, vlines, bars)
