"""``whatif --plot``: the sweep over h and over h_kv as a PNG (matplotlib, optional)."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from mhaudit import units
from mhaudit.data.whatif import WhatIf, WhatIfRow
from mhaudit.errors import ConfigError, install_hint

Panel = tuple[str, str, Callable[["WhatIfRow"], float], Callable[[float], str], bool]

PANELS: tuple[Panel, ...] = (
    ("parameters (W_Q, W_K, W_V, W_O)", "parameters", lambda r: float(r.params),
     units.count, False),
    ("score matrix b·h·n_q·n_kv, if materialised", "bytes", lambda r: float(r.scores_bytes),
     units.nbytes, True),
    ("KV cache per token", "bytes", lambda r: float(r.kv_cache_bytes_per_token),
     units.nbytes, True),
    ("estimated time (roofline)", "seconds", lambda r: r.est_time_s, units.seconds, True),
)


def _panel(ax: Any, rows: Sequence[WhatIfRow], xs: Sequence[int], panel: Panel,
           xlabel: str) -> None:
    from matplotlib.ticker import FuncFormatter

    title, unit, pick, fmt, log = panel
    ys = [pick(r) for r in rows]
    ax.plot(xs, ys, marker="o", color="#1f77b4", label="estimate")
    now = [(x, pick(r)) for x, r in zip(xs, rows, strict=True) if r.current]
    if now:
        ax.plot(*now[0], marker="o", markersize=13, markerfacecolor="none",
                markeredgecolor="#d62728", markeredgewidth=2, linestyle="none",
                label="current layout")
    measured = [(x, r.measured_ms / 1e3) for x, r in zip(xs, rows, strict=True)
                if r.measured_ms is not None]
    if measured and unit == "seconds":
        ax.plot(*zip(*measured, strict=True), marker="s", color="#2ca02c", label="measured")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if log and min(ys) > 0 and max(ys) / min(ys) > 8:
        ax.set_yscale("log", base=2 if unit == "bytes" else 10)  # bytes: 1, 2, 4 ... MiB
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(unit)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)


def whatif_png(result: WhatIf) -> bytes:
    """Both sweeps as a PNG image: four panels against h, two against h_kv."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib, which is not installed",
                          f"Install it with: {install_hint('plot')}.") from None
    fig, axes = plt.subplots(3, 2, figsize=(11, 11))
    by_h = result.by_heads
    for ax, panel in zip(axes[:2].flat, PANELS, strict=True):
        _panel(ax, by_h, [r.heads for r in by_h], panel, "query heads h (d_k = width / h)")
    by_kv = result.by_kv_heads
    spec = result.spec
    for ax, panel in zip(axes[2], (PANELS[2], PANELS[3]), strict=True):
        _panel(ax, by_kv, [r.kv_heads for r in by_kv], panel,
               f"KV heads h_kv (h = {spec.heads})")
    fig.suptitle(f"what-if for {spec.name or '(root)'}: width h·d_k {spec.inner_width}, "
                 f"n = {spec.seq_len}, b = {spec.batch_size}, {spec.dtype} on {result.gpu}")
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=110, format="png")
    plt.close(fig)
    return image.getvalue()
