"""The what-if table: one row per alternative head layout, the current one starred."""

from __future__ import annotations

import json

from mhaudit import units
from mhaudit.data.schema import whatif_to_dict
from mhaudit.data.whatif import LayoutSpec, WhatIf, WhatIfRow
from mhaudit.render.escape import plain, text_data
from mhaudit.render.fit import column_groups, simple_table, text_width
from mhaudit.render.style import PLAIN, RenderOptions, wrap


def _cells(row: WhatIfRow, measured: bool) -> list[str]:
    kernel = row.backend + (" (scores in HBM)" if row.materializes_scores else "")
    cells = [
        "*" if row.current else "", str(row.heads), str(row.kv_heads), str(row.head_dim),
        f"{row.params:,}", units.flops(row.flops), units.nbytes(row.scores_bytes),
        units.nbytes(row.kv_cache_bytes_per_token), kernel,
        str(row.kernel_head_dim) if row.kernel_head_dim else units.NONE,
        f"{row.padding_waste:.1%}", f"{units.seconds(row.est_time_s)} ({row.bound})",
        units.seconds(row.decode_step_s), units.nbytes(row.decode_kv_read_bytes),
        units.nbytes(row.train_scores_saved_bytes),
    ]
    if measured:
        cells.append(units.NONE if row.measured_ms is None else f"{row.measured_ms:.3g} ms")
    cells.append(",".join(row.flags) or units.NONE)
    return cells


HEADERS = ("", "h", "h_kv", "d_k", "params", "FLOPs", "scores", "KV/token", "kernel",
           "kernel d", "pad", "est. time (tiles)", "decode step", "KV read", "train scores")
KEYS = 4
"""The leading columns (current mark, h, h_kv, d_k) that every part of a split table repeats."""


def _notes(result: WhatIf, measured: bool) -> list[str]:
    """One sentence per column, in the table's order."""
    spec = result.spec
    mha = {r.params for r in result.rows if r.kv_heads == r.heads}
    params = (f"Q, K, V and O weights and biases; they stay {mha.pop():,} for every h with "
              f"h_kv = h (textbook 4·d² + biases: {result.rows[0].textbook_params:,})"
              if len(mha) == 1 else "Q, K, V and O weights and biases; they vary with h")
    notes = [
        "* marks the current layout; h query heads, h_kv key/value heads, d_k the head "
        f"dim (h·d_k = {spec.inner_width} in every row).",
        f"params: {params}.",
        "FLOPs: forward FLOPs of the block, 2 per multiply-add.",
        "scores: the b·h·n_q·n_kv score matrix were it materialised; it grows linearly "
        "with h.",
        "KV/token: K and V cache bytes per token, 2·h_kv·d_k elements.",
        f"kernel: the attention kernel {result.gpu} would run; '(scores in HBM)' when it "
        "writes the score matrix to memory.",
        f"kernel d: the head dim that kernel is compiled for ({units.NONE}: no fixed sizes); "
        "pad: the share of its head-dim work that is padding.",
        f"est. time (tiles): roofline time of one forward on {result.gpu} and what bounds "
        "it; fused causal kernels skip the masked 128×128 tiles.",
        "decode step: roofline time of one new token per sequence with n_kv tokens "
        "cached; KV read: the cached K/V bytes that step reads.",
        "train scores: score-shaped bytes the forward keeps for the backward, from a fake "
        "forward of the layout: 0 B where a fused kernel takes the head dim (it keeps only "
        "a log-sum-exp per row and recomputes the scores), the score matrix where the "
        "layout falls back to the math kernel or to eager softmax (the fused kernel's d_k "
        f"limit, or --implementation eager); {units.NONE}: too large to describe.",
    ]
    if measured:
        notes.append("measured: median measured forward time of the block.")
    notes.append(f"flags: the rule codes the layout raises ({units.NONE}: none).")
    return notes


def model_inputs(spec: LayoutSpec) -> str:
    """``input_ids 1×128 int64; block `` before the block's own shape, as ``report``'s header
    names them (nothing for a spec)."""
    named = ", ".join(plain(f"{name} {'×'.join(map(str, shape))} {dtype}".rstrip())
                      for name, shape, dtype in spec.model_inputs)
    return f"{named}; block " if named else ""


def render_whatif_table(result: WhatIf, options: RenderOptions = PLAIN) -> str:
    """The what-if table with a header line and a note per column, fitted to
    ``options.width``: a table too wide is split into parts that repeat h, h_kv and d_k."""
    spec = result.spec
    measured = any(r.measured_ms is not None for r in result.rows)
    headers = [*HEADERS, *(["measured"] if measured else []), "flags"]
    head = (f"what-if for {plain(spec.name) or '(root)'}: d_model {spec.d_model}, width h·d_k "
            f"{spec.inner_width}; input: {model_inputs(spec)}b {spec.batch_size} × n "
            f"{spec.seq_len}"
            f"{'' if spec.seq_len_kv in (None, spec.seq_len) else f' (n_kv {spec.seq_len_kv})'}"
            f", {spec.dtype}, {spec.implementation}, on {result.gpu}")
    rows = [_cells(r, measured) for r in result.rows]
    width = None if options.wide else options.width
    body = simple_table(rows, headers)
    if width is not None and text_width(body) > width:
        body = "\n\n".join(column_groups(rows, headers, KEYS, width))
    notes = [part for note in _notes(result, measured) for part in wrap(note, options)]
    return "\n".join([*wrap(head, options), body, *notes]) + "\n"


def render_whatif_json(result: WhatIf, options: RenderOptions = PLAIN) -> str:
    """The sweep as indented JSON: the spec, both sweeps and their merged ``rows``."""
    return json.dumps(text_data(whatif_to_dict(result)), indent=2) + "\n"
