"""The what-if part of the HTML page: each sweep's table beside its charts."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mhaudit import units
from mhaudit.data import WhatIf, WhatIfRow
from mhaudit.render.escape import html as escape
from mhaudit.render.html.svg import PALETTE, Axis, Chart

Panel = tuple[str, str, Callable[[WhatIfRow], float], Callable[[float], str], bool]

PANELS: tuple[Panel, ...] = (
    ("estimated time", "roofline time [s]", lambda r: r.est_time_s, units.seconds, False),
    ("score matrix", "scores if materialised [bytes]", lambda r: float(r.scores_bytes),
     units.nbytes, True),
)

COLUMNS = ("h", "h_kv", "d_k", "params (W_Q, W_K, W_V, W_O)", "scores if materialised",
           "KV cache per token", "kernel", "roofline time", "flags")


def _heads(value: float) -> str:
    return f"{value:,.0f}"


def _chart(title: str, xs: Sequence[float], x_label: str, ys: Sequence[float], y_label: str,
           fmt: Callable[[float], str], binary: bool, current: tuple[float, float, str] | None
           ) -> str:
    chart = Chart(title, Axis(x_label, min(xs), max(xs), base=2, fmt=_heads),
                  Axis(y_label, 0.0, max(ys), log=False, fmt=fmt, binary=binary),
                  width=460, height=300)
    chart.line(xs, ys, "estimate", PALETTE[0])
    if current is not None:
        chart.point(current[0], current[1], "current layout", PALETTE[1], ring=True,
                    note=current[2])
    return chart.svg()


def whatif_charts(sweep: WhatIf) -> list[str]:
    """Estimated time and score bytes against h, and the KV cache against h_kv (for blocks
    that keep a KV cache)."""
    rows = list(sweep.by_heads)
    if not rows:
        return []
    heads = [float(r.heads) for r in rows]
    now = next((r for r in rows if r.current), None)
    charts = []
    for name, label, pick, fmt, binary in PANELS:
        mark = (float(now.heads), pick(now), f"h = {now.heads}") if now else None
        charts.append(_chart(f"{name} vs h", heads, "query heads h (log₂ spacing)",
                             [pick(r) for r in rows], label, fmt, binary, mark))
    kv = list(sweep.by_kv_heads)
    if any(r.kv_cache_bytes_per_token for r in kv) and len(kv) > 1:
        now_kv = next((r for r in kv if r.current), None)
        mark = ((float(now_kv.kv_heads), float(now_kv.kv_cache_bytes_per_token),
                 f"h_kv = {now_kv.kv_heads}") if now_kv else None)
        charts.append(_chart(f"KV cache vs h_kv (h = {sweep.spec.heads})",
                             [float(r.kv_heads) for r in kv], "KV heads h_kv (log₂ spacing)",
                             [float(r.kv_cache_bytes_per_token) for r in kv],
                             "KV cache per token [bytes]", units.nbytes, True, mark))
    return charts


def _row(r: WhatIfRow) -> str:
    cells = (f"{r.heads:,}", f"{r.kv_heads:,}", f"{r.head_dim:,}", units.count(r.params),
             units.nbytes(r.scores_bytes), units.nbytes(r.kv_cache_bytes_per_token),
             r.backend, units.seconds(r.est_time_s), " ".join(r.flags) or "—")
    cls = ' class="current"' if r.current else ""
    return f"<tr{cls}>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"


def whatif_table(sweep: WhatIf) -> str:
    """Every layout of both sweeps, the current one marked."""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    body = "".join(_row(r) for r in sweep.rows)
    return (f'<div class="scroll"><table class="whatif"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def whatif_block(sweep: WhatIf) -> str:
    """The table beside the charts; a line instead of the KV chart for a block without one."""
    charts = whatif_charts(sweep)
    if not any(r.kv_cache_bytes_per_token for r in sweep.by_kv_heads):
        charts.append('<p class="note">KV cache vs h_kv: not applicable: this block keeps no '
                      "KV cache that grows with generated tokens (an encoder or "
                      "cross-attention).</p>")
    note = ('<p class="note">Highlighted row: the current layout. Roofline time: max(FLOPs / '
            "peak, HBM bytes / bandwidth) on the target, a lower bound. Scores if "
            "materialised: b·h·n_q·n_kv elements, whether or not the kernel writes them.</p>")
    return (f'<div class="whatif-pair"><div>{whatif_table(sweep)}{note}</div>'
            f'<div class="charts">{"".join(charts)}</div></div>')
