"""Query heads that routed experts add: each token's query is top-k experts' outputs side by side.

Mixture-of-attention-heads (JetMoE's MoA) projects each token's query with the k experts
its router picks and lays their outputs side by side as heads: one expert's width holds
h_kv heads, the query the core reads holds k·h_kv. The query's heads are then its
features per token, read from the core operand against the tokens K's projection ran
on (one sequence: self-attention with as many queries as keys).
"""

from __future__ import annotations

from torch import fx

from mhaudit.detect.sources.walker import Source
from mhaudit.trace.graphs import numel


def routed_query_heads(q: fx.Node, q_parts: tuple[Source, ...], k_parts: tuple[Source, ...],
                       head_dim: int, same_length: bool) -> int | None:
    """Heads of a query wider per token than its projection's output, else None."""
    if not same_length or head_dim <= 0 or len(q_parts) != 1 or len(k_parts) != 1:
        return None
    q_op, k_op = q_parts[0].projection, k_parts[0].projection
    if q_op is None or k_op is None or q_op.weight == k_op.weight or not k_op.rows:
        return None
    per_token = numel(q) // k_op.rows  # (B, h, n, d_k) over B·n key rows: h·d_k
    if per_token <= q_parts[0].width or per_token % q_parts[0].width or per_token % head_dim:
        return None
    return per_token // head_dim
