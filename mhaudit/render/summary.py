"""One row per audited model, for commands given several targets."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from mhaudit import units
from mhaudit.data import Report, Severity
from mhaudit.render.fit import fitted

SUMMARY_HEADERS = ("model", "blocks", "params", "attention", "FLOPs", "KV/token", "findings")
SUMMARY_DROP_ORDER = ("attention", "blocks", "KV/token", "params")
"""Columns given up, first to last, when the summary does not fit the width; then each
model becomes a record of ``name: value`` lines."""


def _findings(report: Report) -> str:
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    parts = [f"{n} {s.value}" for s, n in reversed(counts.items()) if n]
    return ", ".join(parts) or "none"


def summary_rows(reports: Sequence[Report]) -> list[list[str]]:
    """Model, block count, params, attention params, FLOPs, KV cache per token, findings."""
    return [
        [r.model.source, str(r.totals.num_blocks), units.count(r.totals.params_total),
         units.count(r.totals.attention_params), units.flops(r.totals.flops),
         units.nbytes(r.totals.kv_cache_bytes_per_token), _findings(r)]
        for r in reports
    ]


def summary_table(
    reports: Sequence[Report], tablefmt: str = "simple", width: int | None = None
) -> str:
    """The summary across models as a text (``simple``) table fitted to ``width``, or a
    markdown (``github``) one."""
    if tablefmt == "simple":
        return fitted(summary_rows(reports), SUMMARY_HEADERS, SUMMARY_DROP_ORDER, width)
    return tabulate(summary_rows(reports), headers=SUMMARY_HEADERS, tablefmt=tablefmt,
                    disable_numparse=True)
