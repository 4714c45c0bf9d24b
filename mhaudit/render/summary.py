"""One row per audited model, for commands given several targets."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from mhaudit import units
from mhaudit.data import Report, Severity

SUMMARY_HEADERS = ("model", "blocks", "params", "attention", "FLOPs", "KV/token", "findings")


def _findings(report: Report) -> str:
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    parts = [f"{n} {s.value}" for s, n in reversed(counts.items()) if n]
    return ", ".join(parts) or "none"


def summary_rows(reports: Sequence[Report]) -> list[list[str]]:
    """Model, block count, params, attention params, FLOPs, KV cache per token, findings."""
    return [
        [r.model.source, str(r.totals.num_blocks), units.count(r.totals.params_total),
         units.count(r.totals.attention_params), units.si(r.totals.flops),
         units.nbytes(r.totals.kv_cache_bytes_per_token), _findings(r)]
        for r in reports
    ]


def summary_table(reports: Sequence[Report], tablefmt: str = "simple") -> str:
    """The summary across models as a text (``simple``) or markdown (``github``) table."""
    return tabulate(summary_rows(reports), headers=SUMMARY_HEADERS, tablefmt=tablefmt,
                    disable_numparse=True)
