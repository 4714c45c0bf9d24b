"""One self-contained HTML page: the tables, a roofline, memory, per-block costs, what-if curves.

Inline SVG only: no network, no JavaScript. Every figure comes from the report (or the
what-if sweeps the CLI passes in); nothing is computed here beyond placing points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from mhaudit import units
from mhaudit.data import AttentionBlock, Report
from mhaudit.render.escape import html as escape
from mhaudit.render.style import PLAIN, RenderOptions
from mhaudit.render.summary import SUMMARY_HEADERS, summary_rows
from mhaudit.render.html.svg import PALETTE, Axis, Chart, bar_chart
from mhaudit.render.table import (
    BLOCK_HEADERS,
    block_rows,
    flag_lines,
    formula_lines,
    header_lines,
    target_lines,
    total_lines,
)

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px auto;
       max-width: 1280px; color: #222; background: #fff; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.how { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
.charts svg { border: 1px solid #e6e6e6; border-radius: 4px; background: #fff; }
ul.flags { list-style: none; padding-left: 0; font-size: 14px; }
ul.flags li { margin: 6px 0; padding: 6px 10px; border-left: 4px solid #999; background: #fafafa; }
li.error { border-color: #c62828 !important; } li.warning { border-color: #ef8f00 !important; }
li.info { border-color: #1f77b4 !important; } .code { font-weight: bold; font-family: monospace; }
.fix { color: #444; display: block; margin-top: 2px; }
pre { background: #f7f7f7; padding: 8px; font-size: 12px; overflow-x: auto; }
"""


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _section(report: Report, name: str) -> dict[str, Any] | None:
    """An optional section (``decode``, ``training``) as plain data, wherever it is carried."""
    value = getattr(report, name, None)
    if value is None:
        value = report.extras.get(name)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value if isinstance(value, dict) else None


def _flops_per_s(value: float) -> str:
    return units.si(value, "FLOP/s")


def roofline_chart(report: Report) -> str | None:
    """Attainable FLOP/s against arithmetic intensity on the target, every block a point."""
    estimated = [(b, b.target) for b in report.blocks if b.target is not None]
    if not estimated:
        return None
    first = estimated[0][1]
    assert first is not None
    roof = first.roofline
    peak = roof.flops / roof.compute_time_s if roof.compute_time_s else 0.0
    bandwidth = roof.bytes_moved / roof.memory_time_s if roof.memory_time_s else 0.0
    if peak <= 0 or bandwidth <= 0:
        return None
    ridge = peak / bandwidth
    points: list[tuple[str, float, float, str]] = []
    for group in report.groups:
        r = group.block.target.roofline if group.block.target is not None else None
        if r is not None and r.arithmetic_intensity and r.time_s > 0:
            label = (group.pattern or "(root)") + (f" ×{group.count}" if group.count > 1 else "")
            points.append(("prefill", r.arithmetic_intensity, r.flops / r.time_s, label))
    decode = _section(report, "decode")
    for entry in (decode or {}).get("blocks", []) or []:
        flops, moved, time_s = (entry.get("flops"), entry.get("kv_read_bytes"),
                                entry.get("time_s"))
        if flops and moved and time_s:
            points.append(("decode", flops / moved, flops / time_s, str(entry.get("name", ""))))
    intensities = [p[1] for p in points] + [ridge]
    lo_x, hi_x = min(intensities) / 4, max(intensities) * 4
    chart = Chart(
        f"Roofline on {first.gpu_name} ({first.dtype})",
        Axis("arithmetic intensity [FLOP/B]", lo_x, hi_x, fmt=_plain_si),
        Axis("attainable throughput [FLOP/s]", min(bandwidth * lo_x / 4, peak) / 2, peak * 2,
             fmt=_flops_per_s),
        width=620, height=380,
    )
    left, right = chart.x.span()
    xs = [left, ridge, right]
    chart.line(xs, [min(peak, bandwidth * x) for x in xs], "roof: min(peak, bandwidth × I)",
               "#444", markers=False)
    chart.vline(ridge, f"ridge {ridge:.0f} FLOP/B")
    seen: set[str] = set()
    for phase, x, y, name in points:
        color = PALETTE[0] if phase == "prefill" else PALETTE[1]
        note = name if name not in seen and len(seen) < 6 else ""
        seen.add(name)
        chart.point(x, y, f"{phase} blocks", color, note=note)
    return chart.svg()


def _plain_si(value: float) -> str:
    return units.si(value)


def _name(block: AttentionBlock) -> str:
    return block.name or "(root)"


def memory_chart(report: Report) -> str:
    """Parameters, activations, scores, KV cache (and training states) in bytes, log scale."""
    t = report.totals
    scores = sum(b.memory.scores_bytes or 0 for b in report.blocks)
    unmaterialised = sum(b.memory.scores_bytes_if_materialized for b in report.blocks)
    items: list[tuple[str, float, str]] = [
        ("parameters", t.param_bytes, units.nbytes(t.param_bytes)),
        ("peak activations", t.peak_activation_bytes or 0,
         units.nbytes(t.peak_activation_bytes) if t.peak_activation_bytes else "not estimated"),
        ("attention scores", scores or unmaterialised,
         units.nbytes(scores) if scores else f"{units.nbytes(unmaterialised)} if materialised"),
        ("KV cache (audited context)", sum(b.memory.kv_cache_bytes for b in report.blocks),
         units.nbytes(sum(b.memory.kv_cache_bytes for b in report.blocks))),
    ]
    training = _section(report, "training")
    for key, value in ((training or {}).get("breakdown_bytes") or {}).items():
        items.append((f"training: {key.replace('_', ' ')}", float(value), units.nbytes(value)))
    return bar_chart("Memory breakdown", items, "bytes (log scale)", units.nbytes,
                     color=PALETTE[2], base=2)


def per_block_charts(report: Report) -> list[str]:
    """FLOPs and HBM bytes moved per block (per group when there are many blocks)."""
    if len(report.blocks) <= 40:
        rows = [(_name(b), b) for b in report.blocks]
    else:
        rows = [(f"{g.pattern or '(root)'} ×{g.count}", g.block) for g in report.groups]
    flops = [(name, float(b.flops.total), units.si(b.flops.total)) for name, b in rows]
    moved = [(name, float(b.target.roofline.bytes_moved) if b.target else 0.0,
              units.nbytes(b.target.roofline.bytes_moved) if b.target else "no estimate")
             for name, b in rows]
    return [
        bar_chart("Forward FLOPs per block", flops, "FLOPs (2 per multiply-add, log scale)",
                  _plain_si, color=PALETTE[0]),
        bar_chart("HBM bytes moved per block", moved, "bytes (log scale)", units.nbytes,
                  color=PALETTE[3], base=2),
    ]


def whatif_charts(sweep: Any) -> list[str]:
    """Estimated time, score bytes and KV cache against h, and time against h_kv."""
    rows = list(sweep.by_heads)
    if not rows:
        return []
    heads = [float(r.heads) for r in rows]
    current = next((r for r in rows if r.current), None)
    x = Axis("query heads h (log₂)", min(heads), max(heads), base=2, fmt=_plain_si)
    charts = []
    panels = (
        ("estimated time", "roofline time [s]", [r.est_time_s for r in rows], units.seconds,
         lambda r: r.est_time_s),
        ("score matrix", "scores if materialised [bytes]",
         [float(r.scores_bytes) for r in rows], units.nbytes, lambda r: float(r.scores_bytes)),
    )
    for name, label, ys, fmt, pick in panels:
        chart = Chart(f"{name} vs h", x,
                      Axis(label, min(ys), max(ys), fmt=fmt, base=2 if fmt is units.nbytes else 10),
                      width=420, height=300)
        chart.line(heads, ys, name, PALETTE[0])
        if current is not None:
            chart.point(float(current.heads), pick(current), "current layout", PALETTE[1],
                        ring=True, note=f"h = {current.heads}")
        charts.append(chart.svg())
    kv = list(sweep.by_kv_heads)
    if len(kv) > 1:
        kvs = [float(r.kv_heads) for r in kv]
        cache = [float(r.kv_cache_bytes_per_token) for r in kv]
        chart = Chart(f"KV cache vs h_kv (h = {sweep.spec.heads})",
                      Axis("KV heads h_kv (log₂)", min(kvs), max(kvs), base=2, fmt=_plain_si),
                      Axis("KV cache per token [bytes]", min(cache), max(cache),
                           fmt=units.nbytes, base=2), width=420, height=300)
        chart.line(kvs, cache, "KV cache per token", PALETTE[2])
        now = next((r for r in kv if r.current), None)
        if now is not None:
            chart.point(float(now.kv_heads), float(now.kv_cache_bytes_per_token),
                        "current layout", PALETTE[1], ring=True, note=f"h_kv = {now.kv_heads}")
        charts.append(chart.svg())
    return charts


def _flags_html(report: Report) -> str:
    items = []
    lines = flag_lines(report)
    severities = [f.severity for g in report.groups for f in g.block.findings]
    severities += [f.severity for f in report.findings if f.block is None]
    for (finding, fix), severity in zip(zip(lines[::2], lines[1::2], strict=True), severities,
                                        strict=True):
        code, rest = finding.split(" ", 1)
        items.append(f'<li class="{severity.value}"><span class="code">{escape(code)}</span> '
                     f'{escape(rest)}<span class="fix">{escape(fix.strip())}</span></li>')
    return '<ul class="flags">' + "".join(items) + "</ul>"


def report_section(report: Report, options: RenderOptions, level: int = 1) -> str:
    """Everything about one report."""
    title, *how = header_lines(report)
    h, h2 = f"h{level}", f"h{level + 1}"
    out = [f"<{h}>{escape(title)}</{h}>", f'<p class="how">{escape(" ".join(how))}</p>']
    if report.groups:
        out.append(html_table(BLOCK_HEADERS, block_rows(report)))
    else:
        out.append("<p>No attention blocks found.</p>")
    if report.findings:
        out += [f"<{h2}>Findings</{h2}>", _flags_html(report)]
    charts = [c for c in (roofline_chart(report), memory_chart(report)) if c]
    charts += per_block_charts(report) if report.blocks else []
    out += [f"<{h2}>Costs</{h2}>", '<div class="charts">' + "\n".join(charts) + "</div>"]
    flagged = {f.block for f in report.findings}
    sweeps = [s for s in options.sweeps if s.spec.name in flagged]
    for sweep in sweeps:
        label = sweep.spec.name or "(root)"
        out += [f"<{h2}>What if: the head layout of {escape(label)}</{h2}>",
                '<div class="charts">' + "\n".join(whatif_charts(sweep)) + "</div>"]
    details = [line for g in report.groups for line in formula_lines(g)]
    out += [f"<{h2}>Parameters and target</{h2}>",
            "<pre>" + escape("\n".join([*details, "", *target_lines(report)])) + "</pre>",
            f"<{h2}>Totals</{h2}>",
            "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in total_lines(report))
            + "</ul>"]
    return "\n".join(out)


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n"
            "</body></html>\n")


def render_html(report: Report, options: RenderOptions = PLAIN) -> str:
    """One report as a self-contained HTML page."""
    return page(f"mhaudit: {report.model.source}", report_section(report, options))


def render_html_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """Several reports on one page, a summary across models first."""
    parts = [f"<h1>mhaudit: {len(reports)} models</h1>",
             html_table(SUMMARY_HEADERS, summary_rows(reports))]
    parts += [f"<section>{report_section(r, options, level=2)}</section>" for r in reports]
    return page(f"mhaudit: {len(reports)} models", "\n".join(parts))

