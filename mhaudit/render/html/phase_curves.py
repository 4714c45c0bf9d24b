"""The phases over time and context: live memory across the training step, the decode step
against the context."""

from __future__ import annotations

from mhaudit import units
from mhaudit.data import DecodeCost, TrainingCost
from mhaudit.render.escape import html as escape
from mhaudit.render.html.svg import PALETTE, Axis, Chart, Format

STEP_COLORS = {"forward": PALETTE[0], "backward": PALETTE[3], "optimizer": PALETTE[4]}


def _percent(value: float) -> str:
    return f"{value:.0f} %"


def timeline_chart(t: TrainingCost) -> str | None:
    """Live bytes over the step, one line per part of it, the peak marked; None without
    a timeline."""
    points = t.timeline
    if len(points) < 2 or t.timeline_peak_index is None:
        return None
    xs = [100.0 * i / (len(points) - 1) for i in range(len(points))]
    chart = Chart(f"Live memory over the training step (peak {units.nbytes(t.peak_bytes)})",
                  Axis("position in the step [% of its ops] (forward → backward → update)",
                       0.0, 100.0, log=False, fmt=_percent),
                  Axis("live bytes", 0.0, float(t.peak_bytes), log=False, fmt=units.nbytes,
                       binary=True), width=1080, height=340)
    start = 0
    for step in dict.fromkeys(p.step for p in points):
        end = max(i for i, p in enumerate(points) if p.step == step) + 1
        begin = max(0, start - 1)  # each part starts where the one before it ended
        span = range(begin, end)
        if len(span) > 1:
            chart.line([xs[i] for i in span], [float(points[i].live_bytes) for i in span],
                       step, STEP_COLORS.get(step, PALETTE[6]), markers=False)
        else:
            chart.point(xs[begin], float(points[begin].live_bytes), step,
                        STEP_COLORS.get(step, PALETTE[6]))
        start = end
    peak = points[t.timeline_peak_index]
    chart.point(xs[t.timeline_peak_index], float(peak.live_bytes), "peak", PALETTE[1],
                ring=True, note=f"peak {units.nbytes(peak.live_bytes)} ({peak.step})")
    return chart.svg()


def timeline_caption(t: TrainingCost) -> str:
    """What the timeline's points are."""
    folded = (f", {t.folded_layers:,} folded layers copied in where they run"
              if t.folded_layers else "")
    return (f"Every byte alive after each op of the step ({len(t.timeline) - 1:,} points, "
            f"each the highest of the ops it stands for{folded}); the update is drawn at its "
            "peak only.")


def _context(value: float) -> str:
    return units.count(round(value))


def _context_chart(d: DecodeCost, title: str, y_label: str, pick: str, fmt: Format,
                   binary: bool) -> str:
    points = d.by_context
    xs = [float(p.context) for p in points]
    ys = [float(getattr(p, pick)) for p in points]
    chart = Chart(title, Axis("cached tokens (context, log₂ scale)", min(xs), max(xs), base=2,
                              fmt=_context),
                  Axis(y_label, 0.0, max(ys), log=False, fmt=fmt, binary=binary),
                  width=460, height=300)
    chart.line(xs, ys, "formula", PALETTE[0])
    now = next((p for p in points if p.context == d.context), None)
    if now is not None:
        chart.point(float(now.context), float(getattr(now, pick)), "this step", PALETTE[1],
                    ring=True, note=f"context {now.context:,}")
    return chart.svg()


def decode_context_block(d: DecodeCost) -> str:
    """Bytes and time per decode step against the context: a table beside two charts."""
    if not d.by_context or len(d.by_context) < 2:
        return ""
    current = ' class="current"'
    rows = "".join(
        f'<tr{current if p.context == d.context else ""}>'
        f"<td>{p.context:,}</td><td>{escape(units.nbytes(p.kv_read_bytes))}</td>"
        f"<td>{escape(units.nbytes(p.bytes_per_step))}</td>"
        f"<td>{escape(units.seconds(p.time_per_step_s))}</td><td>{escape(p.bound)}</td></tr>"
        for p in d.by_context)
    table = ('<div class="scroll"><table><thead><tr><th>context</th><th>KV cache read</th>'
             "<th>bytes per step</th><th>time per step</th><th>bound</th></tr></thead>"
             f"<tbody>{rows}</tbody></table></div>")
    charts = [
        _context_chart(d, "Decode bytes per step vs context", "bytes per step",
                       "bytes_per_step", units.nbytes, True),
        _context_chart(d, "Decode time per step vs context", "roofline time per step [s]",
                       "time_per_step_s", units.seconds, False),
    ]
    caption = ("Computed from the decode step's formulas at each context (weights once, the "
               "cache read at the context, window-capped), not traced; the contexts run a "
               "factor of 4 apart up to the model's longest.")
    return (f'<div class="whatif-pair"><div>{table}<p class="note">{escape(caption)}</p></div>'
            f'<div class="charts">{"".join(charts)}</div></div>')
