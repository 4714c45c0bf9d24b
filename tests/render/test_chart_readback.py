"""Every HTML chart read back through its own axes shows the values of the report.

Each chart's ticks are parsed from their text (:mod:`chart_reader`); each mark is mapped
through them and must sit within a pixel of the value the chart is meant to show, taken
from the report's JSON (and the GPU's datasheet), never from the drawing code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from chart_reader import TOLERANCE_PX, Read, read_chart

from mhaudit.cost.devices import get_profile
from mhaudit.data import Report, WhatIf
from mhaudit.render import render
from mhaudit.render.style import RenderOptions
from mhaudit.whatif import spec_from_block, whatif

ROOT = Path(__file__).resolve().parents[2]
H100_PEAK = 989e12  # dense bf16 FLOP/s, NVIDIA's H100 SXM datasheet
H100_BANDWIDTH = 3.35e12  # HBM3 bytes/s, same datasheet

Point = tuple[float, float]


@dataclass
class XY:
    """What an x/y chart must show: its points, the curve its lines follow, its markers."""

    points: list[Point] = field(default_factory=list)
    curve: Callable[[float], float] | None = None
    vlines: list[float] = field(default_factory=list)


@dataclass
class Bars:
    """What a bar chart must show: each row's parts by name, in order (stacked when more
    than one)."""

    rows: list[list[tuple[str, float]]]


Expected = XY | Bars


def _roofline(d: dict[str, Any]) -> XY:
    points = []
    for b in d["blocks"]:
        r = b["target"]["roofline"]
        points.append((r["arithmetic_intensity"], r["flops"] / r["time_s"]))
    dec = d.get("decode")
    if dec and dec["applicable"]:
        points += [(e["flops"] / (e["time_s"] * H100_BANDWIDTH), e["flops"] / e["time_s"])
                   for e in dec["blocks"]]
        points.append((dec["flops_per_step"] / dec["bytes_per_step"],
                       dec["flops_per_step"] / dec["time_per_step_s"]))
    return XY(points, curve=lambda x: min(H100_PEAK, H100_BANDWIDTH * x),
              vlines=[H100_PEAK / H100_BANDWIDTH])


def _memory(d: dict[str, Any]) -> Bars:
    t = d["totals"]
    rows = [[("parameters", t["param_bytes"]), ("buffers", t["buffer_bytes"]),
             ("activations live at the peak", t["peak_activation_bytes"])]]
    dec = d.get("decode")
    if dec and dec["applicable"]:
        rows.append([("parameters", dec["param_bytes"]), ("KV cache", dec["kv_cache_bytes"])])
    return Bars(rows)


def _training(d: dict[str, Any]) -> Bars:
    b = d["training"]["breakdown_bytes"]
    return Bars([[("params", b["params"]), ("grads", b["grads"]),
                  ("optimizer states", b["optimizer_states"]),
                  ("activations", b["activations"]), ("temporaries", b["temporaries"])]])


def _timeline(d: dict[str, Any]) -> XY:
    line = d["training"]["timeline"]
    return XY([(100 * i / (len(line) - 1), p["live_bytes"]) for i, p in enumerate(line)])


def _context(d: dict[str, Any], key: str) -> XY:
    return XY([(p["context"], p[key]) for p in d["decode"]["by_context"]])


def _decode_bar(d: dict[str, Any]) -> Bars:
    dec = d["decode"]
    return Bars([[("weights read", dec["weight_bytes"]), ("KV cache read", dec["kv_read_bytes"]),
                  ("KV cache written", dec["kv_write_bytes"])]])


NAMES = {"params": "params", "grads": "grads", "optimizer_states": "optimizer states",
         "activations": "activations", "kv_cache": "KV cache", "temporaries": "temporaries",
         "nccl_buffers": "NCCL buffers", "workspace": "workspace",
         "cuda_context": "CUDA context", "fragmentation": "fragmentation"}
SENT = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send_recv")


def _devices(phase: str) -> Callable[[dict[str, Any]], Bars]:
    def expect(d: dict[str, Any]) -> Bars:
        per = d[phase]["parallel"]["per_device_bytes"]
        return Bars([[(NAMES[k], per[k]) for k in NAMES if per[k]]])
    return expect


def _schedule(phase: str) -> Callable[[dict[str, Any]], Bars]:
    def expect(d: dict[str, Any]) -> Bars:
        timeline = d[phase]["parallel"]["pipeline"]["timeline"]
        return Bars([[(kind, float(span)) for kind, span in rank] for rank in timeline])
    return expect


def _sent(phase: str) -> Callable[[dict[str, Any]], Bars]:
    def expect(d: dict[str, Any]) -> Bars:
        comm = d[phase]["parallel"]["comm_bytes_per_step"]
        return Bars([[(k, comm[k])] for k in SENT])
    return expect


def _sweep(pick: Callable[[Any], Point], rows: str) -> Callable[[WhatIf], XY]:
    return lambda sweep: XY([pick(r) for r in getattr(sweep, rows)])


REPORT_CHARTS: list[tuple[str, Callable[[dict[str, Any]], Expected]]] = [
    (r"Roofline on NVIDIA H100 SXM", _roofline),
    (r"What makes up the peak", _memory),
    (r"Forward FLOPs per block",
     lambda d: Bars([[("", g["flops"]["total"])] for g in _firsts(d)])),
    (r"HBM bytes moved per block",
     lambda d: Bars([[("", g["target"]["roofline"]["bytes_moved"])] for g in _firsts(d)])),
    (r"Training step: peak", _training),
    (r"Live memory over the training step", _timeline),
    (r"Decode step at context", _decode_bar),
    (r"Decode bytes per step vs context", lambda d: _context(d, "bytes_per_step")),
    (r"Decode time per step vs context", lambda d: _context(d, "time_per_step_s")),
    (r"training step: bytes per device", _devices("training")),
    (r"training step: bytes each device sends", _sent("training")),
    (r"decode step: bytes per device", _devices("decode")),
    (r"decode step: bytes each device sends", _sent("decode")),
    (r"training step: (gpipe|1f1b), \d+ micro-batches", _schedule("training")),
    (r"decode step: (gpipe|1f1b), \d+ micro-batches", _schedule("decode")),
]
SWEEP_CHARTS: list[tuple[str, Callable[[WhatIf], XY]]] = [
    (r"estimated time vs h$", _sweep(lambda r: (r.heads, r.est_time_s), "by_heads")),
    (r"score matrix vs h$", _sweep(lambda r: (r.heads, r.scores_bytes), "by_heads")),
    (r"KV cache vs h_kv", _sweep(lambda r: (r.kv_heads, r.kv_cache_bytes_per_token),
                                 "by_kv_heads")),
]


def _firsts(d: dict[str, Any]) -> list[dict[str, Any]]:
    """The first block of each group, in the groups' order."""
    by_name = {b["name"]: b for b in d["blocks"]}
    return [by_name[g["names"][0]] for g in d["groups"]]


def _near(read: Read, p: Point, a: float, b: float) -> bool:
    assert read.y is not None
    return (abs(read.x.px(p[0]) - a) <= TOLERANCE_PX
            and abs(read.y.px(p[1]) - b) <= TOLERANCE_PX)


def _inside(read: Read, a: float, b: float) -> None:
    x0, y0, x1, y1 = read.plot
    assert x0 - 0.5 <= a <= x1 + 0.5 and y0 - 0.5 <= b <= y1 + 0.5, (
        f"{read.title}: a mark at ({a:.1f}, {b:.1f}) lies outside the plot {read.plot}")


def check_xy(read: Read, want: XY) -> None:
    """Every mark and vertex reads back as an expected point (or on the curve), inside the
    plot; every expected point is drawn."""
    assert read.y is not None, f"{read.title}: no y ticks"
    drawn = [(a, b, "mark") for a, b, _ in read.marks] + [
        (a, b, "vertex") for a, b, _ in read.vertices]
    for a, b, kind in drawn:
        _inside(read, a, b)
        x, y = read.x.value(a), read.y.value(b)
        if kind == "vertex" and want.curve is not None:
            assert abs(read.y.px(want.curve(x)) - b) <= TOLERANCE_PX, (
                f"{read.title}: the line at x = {x:.4g} reads {y:.4g}, not {want.curve(x):.4g}")
            continue
        assert any(_near(read, p, a, b) for p in want.points), (
            f"{read.title}: a {kind} reads ({x:.4g}, {y:.4g}), which the report does not have")
    for p in want.points:
        assert any(_near(read, p, a, b) for a, b, _ in drawn), (
            f"{read.title}: {p} is not drawn where its axes put it")
    for x in want.vlines:
        assert any(abs(read.x.px(x) - a) <= TOLERANCE_PX for a in read.vlines), (
            f"{read.title}: no marker at x = {x:.4g}")


def check_bars(read: Read, want: Bars) -> None:
    """Each part spans, through the axis, from the sum of the parts before it to that sum
    plus its value (a lone bar from zero to its value)."""
    rows = sorted({y for y, *_ in read.bars})
    wanted = [row for row in want.rows if any(v > 0 for _, v in row)]
    assert len(rows) == len(wanted), f"{read.title}: {len(rows)} bars for {len(wanted)} rows"
    for y, row in zip(rows, wanted, strict=True):
        bars = sorted((left, right, title) for yy, left, right, title in read.bars if yy == y)
        start = 0.0
        for name, value in row:
            if value <= 0:
                continue
            # the next bar of that name, left to right (a row may repeat a part's name)
            left, right, title = next(b for b in bars if len(row) == 1 or
                                      b[2].startswith(f"{name}:"))
            bars.remove((left, right, title))
            for px, v in ((left, start), (right, start + value)):
                _inside(read, px, 0.0)
                assert abs(read.x.px(v) - px) <= TOLERANCE_PX or (
                    v == start + value and right - left == 1.0 and read.x.px(v) < px), (
                    f"{read.title}: {name or 'the bar'} reads {read.x.value(px):.4g} at an "
                    f"edge where the report says {v:.4g}")
            start += value


def check(read: Read, want: Expected) -> None:
    if isinstance(want, XY):
        check_xy(read, want)
    else:
        check_bars(read, want)


def expectations(report: Report, sweep: WhatIf | None) -> list[tuple[str, Expected]]:
    d = report.to_dict()
    out: list[tuple[str, Expected]] = []
    for pattern, make in REPORT_CHARTS:
        out.append((pattern, _lazy(make, d)))
    for pattern, make_sweep in SWEEP_CHARTS:
        if sweep is not None:
            out.append((pattern, make_sweep(sweep)))
    return out


def _lazy(make: Callable[[dict[str, Any]], Expected], d: dict[str, Any]) -> Expected:
    try:
        return make(d)
    except (KeyError, TypeError, ZeroDivisionError):  # a phase this report does not have
        return XY()


def svgs(page: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", page, re.S)


def read_page(report: Report, sweep: WhatIf | None, page: str) -> int:
    """Checks every chart of ``page``; returns how many were checked."""
    wants = expectations(report, sweep)
    charts = svgs(page)
    for svg in charts:
        read = read_chart(svg)
        matches = [want for pattern, want in wants if re.search(pattern, read.title)]
        assert matches, f"no expectation for the chart {read.title!r}: add one here"
        check(read, matches[0])
    return len(charts)


MODELS = {
    "llama --train --decode --parallel": ("examples/llama_gqa.py",
                                          {"train": True, "decode": True,
                                           "parallel": "tp=2,fsdp=2"}),
    "llama --train --decode pipelined": ("examples/llama_gqa.py",
                                         {"train": True, "decode": True, "input_shape": (4, 128),
                                          "parallel": "pp=2,microbatches=4"}),
    "vit encoder": ("examples/vit_encoder.py", {}),
    "encoder-decoder --decode": ("examples/encoder_decoder.py", {"decode": True}),
}


@pytest.fixture(scope="module", params=list(MODELS))
def audited(request: pytest.FixtureRequest) -> tuple[Report, WhatIf, str]:
    from mhaudit.api import audit_target

    path, kwargs = MODELS[request.param]
    report = audit_target(str(ROOT / path), **kwargs)
    flagged = report.findings[0].block if report.findings else report.groups[0].block.name
    sweep = whatif(spec_from_block(next(b for b in report.blocks if b.name == flagged),
                                   "bfloat16"), get_profile("h100"))
    return report, sweep, render(report, "html", RenderOptions(sweeps=(sweep,)))


def test_every_chart_reads_back_the_reports_values(audited: tuple[Report, WhatIf, str]) -> None:
    report, sweep, page = audited
    assert read_page(report, sweep, page) >= 4


def _shift(svg: str, dy: float) -> str:
    """The chart with its marks (not its axes) moved ``dy`` pixels down."""
    svg = re.sub(r'(class="mark" cx="[\d.]+" cy=")([\d.]+)',
                 lambda m: f"{m[1]}{float(m[2]) + dy:.1f}", svg)
    return re.sub(r'(class="series" points=")([^"]+)', lambda m: m[1] + " ".join(
        f"{a},{float(b) + dy:.1f}" for a, b in (p.split(",") for p in m[2].split())), svg)


def test_a_chart_drawn_apart_from_its_axes_fails(audited: tuple[Report, WhatIf, str]) -> None:
    report, sweep, page = audited
    xy = [s for s in svgs(page) if 'class="plot"' in s]
    assert xy
    for svg in xy:
        for dy in (-18.0, -2.0):
            with pytest.raises(AssertionError):
                read_page(report, sweep, _shift(svg, dy))
    bar = next(s for s in svgs(page) if "Forward FLOPs per block" in s)
    wide = re.sub(r'(class="bar" x="[\d.]+" y="[\d.]+" width=")([\d.]+)',
                  lambda m: f"{m[1]}{float(m[2]) * 0.97:.1f}", bar)
    with pytest.raises(AssertionError, match="reads"):
        read_page(report, sweep, wide)


def test_the_html_golden_reads_back_the_hand_written_report() -> None:
    """The golden pins the page; this reads its charts by another road."""
    from fixtures.reports import hand_report

    page = (ROOT / "tests" / "golden" / "hand.html").read_text(encoding="utf-8")
    assert read_page(hand_report(), None, page) == 4


def test_labels_that_find_no_spot_are_listed_inside_the_chart() -> None:
    from mhaudit.render.html.svg import Axis, Chart

    chart = Chart("crowded", Axis("x", 1.0, 10.0), Axis("y", 1.0, 10.0), width=460)
    for i in range(40):
        chart.point(5.0, 5.0, "", "#000", note=f"prefill layers.{i}.self_attn ×1")
    svg = chart.svg()
    assert "not labelled:" in svg
    width = float(re.search(r'width="(\d+)"', svg)[1])  # type: ignore[index]
    height = float(re.search(r'height="(\d+)"', svg)[1])  # type: ignore[index]
    for x, y, text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*'
                                 r'text-anchor="start"[^>]*>([^<]+)</text>', svg):
        assert float(x) + len(text) * 6.6 <= width, f"{text!r} runs past the chart's edge"
        assert float(y) <= height - 2
