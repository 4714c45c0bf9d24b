"""The one number formatter: every figure a user reads (reports, findings, budgets) prints here."""

from __future__ import annotations

NONE = "—"
"""The one sign for a figure that does not exist (a cell with no value, no flags)."""


def count(value: int | float | None) -> str:
    """``16,640``; ``—`` for None."""
    if value is None:
        return NONE
    return f"{value:,.0f}" if isinstance(value, float) else f"{value:,}"


def si(value: float | None, unit: str = "") -> str:
    """``1.23 G`` style with decimal prefixes."""
    if value is None:
        return NONE
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}".rstrip()
    return f"{value:.3g} {unit}".rstrip()


def flops(value: float | None) -> str:
    """``489 MFLOP`` / ``34.7 GFLOP`` / ``512 FLOP``: the one way every renderer writes FLOPs."""
    return si(value, "FLOP")


def nbytes(value: float | None) -> str:
    """``1.5 MiB`` style with binary prefixes."""
    if value is None:
        return NONE
    size = float(value)
    for prefix in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or prefix == "TiB":
            return f"{size:.0f} B" if prefix == "B" else f"{size:.3g} {prefix}"
        size /= 1024
    return f"{value} B"


def signed(value: int) -> str:
    """``+1,024`` / ``-65,536`` / ``0``."""
    return f"{value:+,}" if value else "0"


def percent(value: float, digits: int = 1) -> str:
    """``12.5%`` (``digits`` decimals)."""
    return f"{100 * value:.{digits}f}%"


def decimal(value: float, digits: int = 2) -> str:
    """``1.50``: a fractional count with ``digits`` decimals."""
    return f"{value:,.{digits}f}"


def ratio(value: float) -> str:
    """``1.33×``: how many times a reference."""
    return f"{decimal(value)}×"


def seconds(value: float) -> str:
    """``12.3 µs`` / ``4.56 ms`` / ``1.2 s``."""
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


METRIC_UNITS = {
    "flops": "FLOP",
    "kv_cache_bytes_per_token": "B",
    "peak_memory_bytes": "B",
    "latency_ms": "ms",
    "peak_activation_bytes": "B",
    "train_peak_bytes": "B",
    "decode_step_ms": "ms",
    "decode_kv_cache_bytes": "B",
    "train_peak_bytes_per_device": "B",
    "decode_peak_bytes_per_device": "B",
    "train_comm_bytes_per_step": "B",
}
"""The unit of each gate metric that has one (the others are plain counts)."""


def metric_value(metric: str, value: float | None) -> str:
    """A gate metric with its unit, worded as the report words it.

    Exact counts with separators for parameters; FLOPs as every renderer writes them
    (``11.4 MFLOP``), IEC for bytes (``50 KiB``), ``ms`` for latency.
    """
    if value is None:
        return "n/a"
    unit = METRIC_UNITS.get(metric, "")
    if unit == "ms":
        return f"{value:.3g} ms"
    if unit == "B":
        return nbytes(value)
    if unit == "FLOP":
        return flops(value)
    text = f"{int(value):,}" if float(value).is_integer() else f"{value:,.3g}"
    return f"{text} {unit}".rstrip()
