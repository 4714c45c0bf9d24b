"""The what-if table: one row per alternative head layout, the current one starred."""

from __future__ import annotations

import json
from typing import Any

from tabulate import tabulate

from mhaudit import units
from mhaudit.data.schema import whatif_to_dict
from mhaudit.data.whatif import WhatIf, WhatIfRow
from mhaudit.render.escape import plain


def _cells(row: WhatIfRow, measured: bool) -> list[Any]:
    kernel = row.backend + (" (scores in HBM)" if row.materializes_scores else "")
    cells: list[Any] = [
        "*" if row.current else "", row.heads, row.kv_heads, row.head_dim, f"{row.params:,}",
        units.si(row.flops), units.nbytes(row.scores_bytes),
        units.nbytes(row.kv_cache_bytes_per_token), kernel, row.kernel_head_dim or "-",
        f"{row.padding_waste:.1%}", f"{units.seconds(row.est_time_s)} ({row.bound})",
        units.seconds(row.decode_step_s), units.nbytes(row.decode_kv_read_bytes),
        "-" if row.train_scores_saved_bytes is None else units.nbytes(row.train_scores_saved_bytes),
    ]
    if measured:
        cells.append("-" if row.measured_ms is None else f"{row.measured_ms:.3g} ms")
    cells.append(",".join(row.flags) or "-")
    return cells


def render_whatif_table(result: WhatIf) -> str:
    """The what-if table with a header line and a reading note."""
    spec = result.spec
    measured = any(r.measured_ms is not None for r in result.rows)
    headers = ["", "h", "h_kv", "d_k", "params", "FLOPs", "scores", "KV/token", "kernel",
               "kernel d", "pad", "est. time (tiles)", "decode step", "KV read", "train scores"]
    headers += (["measured"] if measured else []) + ["flags"]
    head = (f"what-if for {plain(spec.name) or '(root)'}: d_model {spec.d_model}, width h·d_k "
            f"{spec.inner_width}, b {spec.batch_size}, n {spec.seq_len}, {spec.dtype}, "
            f"{spec.implementation}, on {result.gpu}")
    mha = {r.params for r in result.rows if r.kv_heads == r.heads}
    params = (f"params stay {mha.pop():,} for every h with h_kv = h (textbook 4·d² + biases: "
              f"{result.rows[0].textbook_params:,})" if len(mha) == 1 else "params vary with h")
    note = (f"{params}; the score matrix b·h·n_q·n_kv grows linearly with h; the KV cache per "
            "token scales with h_kv·d_k. decode step: one new token per sequence at n_kv cached "
            "tokens; train scores: score-shaped bytes the forward keeps for the backward. "
            "* marks the current layout.")
    body = tabulate([_cells(r, measured) for r in result.rows], headers=headers,
                    disable_numparse=True)
    return f"{head}\n{body}\n{note}\n"


def render_whatif_json(result: WhatIf) -> str:
    """The sweep as indented JSON: the spec, both sweeps and their merged ``rows``."""
    return json.dumps(whatif_to_dict(result), indent=2) + "\n"
