"""Sections added to a built report: source locations, fvcore's count, real measurements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from mhaudit.data import AttentionBlock, Measurement, Report, SourceLocation

if TYPE_CHECKING:
    from mhaudit.flops.fvcore_backend import FvcoreFlops


def located(blocks: Sequence[AttentionBlock], found: Sequence[SourceLocation | None]
            ) -> tuple[AttentionBlock, ...]:
    """Each block with the source location found for it (same order)."""
    return tuple(replace(b, location=loc) for b, loc in zip(blocks, found, strict=True))


def with_fvcore_count(report: Report, result: FvcoreFlops) -> Report:
    """The report with fvcore's whole-model count (its MACs × 2) beside mhaudit's own."""
    extras = dict(report.extras)
    extras["fvcore"] = {
        "flops": result.flops,
        "convention": "fvcore counts one multiply-add as one flop; shown here doubled",
        "unsupported_ops": dict(result.unsupported_ops),
    }
    return replace(report, extras=extras)


def with_measured(report: Report, result: Measurement) -> Report:
    """The report with real latency and peak memory in its totals and ``measurement``."""
    totals = replace(
        report.totals,
        latency_ms=result.forward.median_ms,
        measured_peak_memory_bytes=result.peak_memory_bytes,
    )
    return replace(report, totals=totals, measurement=result)
