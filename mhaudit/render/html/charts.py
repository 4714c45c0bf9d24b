"""The cost charts of the HTML page: roofline, what makes up the peak, per-block bars.

Blocks folded into a group (identical layers) are drawn once, labelled with their count.
"""

from __future__ import annotations

from mhaudit import units
from mhaudit.data import Report
from mhaudit.render.escape import html as escape
from mhaudit.render.html.svg import PALETTE, Axis, Chart, bar_chart, stacked_bar_chart

Point = tuple[str, float, float, str]
"""(phase, arithmetic intensity, attainable FLOP/s, label)."""


def _group_label(pattern: str, count: int) -> str:
    return (pattern or "(root)") + (f" ×{count}" if count > 1 else "")


def _prefill_points(report: Report) -> list[Point]:
    points: list[Point] = []
    for group in report.groups:
        r = group.block.target.roofline if group.block.target is not None else None
        if r is not None and r.arithmetic_intensity and r.time_s > 0:
            points.append(("prefill", r.arithmetic_intensity, r.flops / r.time_s,
                           "prefill " + _group_label(group.pattern, group.count)))
    return points


def _decode_points(report: Report, bandwidth: float) -> list[Point]:
    """Each decode block at its own intensity: its FLOPs over the bytes its roofline time
    stands for (time × bandwidth); identical blocks folded into one point with a count."""
    d = report.decode
    if d is None or not d.applicable:
        return []
    pattern = {name: g.pattern for g in report.groups for name in g.names}
    folded: dict[tuple[str, float, float], int] = {}
    for entry in d.blocks:
        if entry.flops and entry.time_s > 0:
            x = entry.flops / (entry.time_s * bandwidth)
            key = (pattern.get(entry.name, entry.name), round(x, 6), entry.flops / entry.time_s)
            folded[key] = folded.get(key, 0) + 1
    points: list[Point] = [("decode", x, y, "decode " + _group_label(name, n))
                           for (name, x, y), n in folded.items()]
    if d.bytes_per_step and d.time_per_step_s > 0:
        points.append(("decode step", d.flops_per_step / d.bytes_per_step,
                       d.flops_per_step / d.time_per_step_s,
                       f"decode step, whole model (context {d.context:,})"))
    return points


def _intensity(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


COLORS = {"prefill": PALETTE[0], "decode": PALETTE[1], "decode step": PALETTE[4]}


def roofline_chart(report: Report) -> str | None:
    """Attainable FLOP/s against arithmetic intensity on the target, log-log: each group
    of blocks a point in the prefill, and in the decode step when it ran."""
    first = next((b.target for b in report.blocks if b.target is not None), None)
    if first is None:
        return None
    roof = first.roofline
    peak = roof.flops / roof.compute_time_s if roof.compute_time_s else 0.0
    bandwidth = roof.bytes_moved / roof.memory_time_s if roof.memory_time_s else 0.0
    if peak <= 0 or bandwidth <= 0:
        return None
    ridge = peak / bandwidth
    points = _prefill_points(report) + _decode_points(report, bandwidth)
    intensities = [p[1] for p in points] + [ridge]
    lo_x, hi_x = min(intensities) / 4, max(intensities) * 4
    chart = Chart(
        f"Roofline on {first.gpu_name} ({first.dtype})",
        Axis("arithmetic intensity [FLOP/B] (log scale)", lo_x, hi_x, fmt=_intensity),
        Axis("attainable throughput [FLOP/s] (log scale)", min(bandwidth * lo_x / 4, peak) / 2,
             peak * 2, fmt=lambda v: units.si(v, "FLOP/s")),
        width=720, height=420,
    )
    left, right = chart.x.span()
    xs = [left, ridge, right]
    chart.line(xs, [min(peak, bandwidth * x) for x in xs], "roof: min(peak, bandwidth × I)",
               "#444", markers=False)
    chart.vline(ridge, f"ridge {ridge:.0f} FLOP/B")
    for phase, x, y, name in points:
        legend = {"prefill": "prefill blocks", "decode": "decode-step blocks",
                  "decode step": "decode step"}[phase]
        chart.point(x, y, legend, COLORS[phase], note=name)
    return chart.svg()


def memory_chart(report: Report) -> str:
    """What makes up the inference peak (and the decode step's resident bytes), stacked:
    each bar one moment, its parts alive together."""
    t = report.totals
    rows: list[tuple[str, list[tuple[str, float]]]] = []
    if t.peak_activation_bytes is not None:
        rows.append(("inference peak", [
            ("parameters", float(t.param_bytes)), ("buffers", float(t.buffer_bytes)),
            ("activations live at the peak", float(t.peak_activation_bytes))]))
    else:
        rows.append(("weights (activations not estimated)", [
            ("parameters", float(t.param_bytes)), ("buffers", float(t.buffer_bytes))]))
    d = report.decode
    if d is not None and d.applicable:
        rows.append((f"decode at context {d.context:,}", [
            ("parameters", float(d.param_bytes)), ("KV cache", float(d.kv_cache_bytes))]))
    return stacked_bar_chart("What makes up the peak", rows, "bytes alive together",
                             units.nbytes, width=720)


def scores_table(report: Report) -> str:
    """Score matrices and KV caches per block, folded: figures of one block at a time."""
    rows = []
    for g in report.groups:
        m = g.block.memory
        scores = (units.nbytes(m.scores_bytes) if m.scores_bytes is not None else
                  f"not materialised ({units.nbytes(m.scores_bytes_if_materialized)} if it were)")
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in (
            _group_label(g.pattern, g.count), scores, units.nbytes(m.kv_cache_bytes),
            units.nbytes(m.kv_cache_bytes_per_token))) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in (
        "block", "attention scores, each block", "KV cache at the audited context",
        "KV cache per token"))
    return (f'<div class="scroll"><table class="per-block"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>'
            '<p class="note">Per block, one block at a time: a block\'s '
            "score matrix lives only while that block runs, so these figures are not live "
            "together and are not added to the peak beside them; the activations of the "
            "peak already hold whichever one is live then. A row ×N stands for N identical "
            "blocks, each with these figures.</p>")


def per_block_charts(report: Report) -> list[str]:
    """FLOPs and HBM bytes moved per group of identical blocks, on linear axes."""
    rows = [(_group_label(g.pattern, g.count), g.block) for g in report.groups]
    flops = [(name, float(b.flops.total), units.si(b.flops.total, "FLOP")) for name, b in rows]
    moved = [(name, float(b.target.roofline.bytes_moved) if b.target else 0.0,
              units.nbytes(b.target.roofline.bytes_moved) if b.target else "no estimate")
             for name, b in rows]
    return [
        bar_chart("Forward FLOPs per block", flops, "FLOP of each block (2 per multiply-add)",
                  lambda v: units.si(v, "FLOP"), color=PALETTE[0], width=720),
        bar_chart("HBM bytes moved per block", moved, "HBM bytes each block reads and writes",
                  units.nbytes, color=PALETTE[3], width=720, binary=True),
    ]
