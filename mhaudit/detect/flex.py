"""A ``flex_attention`` call read as an attention core: Q, K, V are its first operands."""

from __future__ import annotations

from typing import Any

from torch import fx

from mhaudit.detect.patterns.padding import head_dims
from mhaudit.trace.flex import facts_of
from mhaudit.trace.graphs import op_name, shape


def flex_core(node: fx.Node) -> dict[str, Any] | None:
    """The fields of the core (:class:`~mhaudit.detect.cores.Core`) of
    ``flex_attention(q, k, v, score_mod, block_mask, scale, ...)``: q (b, h, n_q, d_k),
    k (b, h_kv, n_kv, d_k), v (b, h_kv, n_kv, d_v); fewer K/V heads than query heads is
    grouped-query attention (``enable_gqa``). Its cost follows the block mask
    (``score_form`` ``flex``)."""
    q, k, v = node.args[:3]
    if not all(isinstance(t, fx.Node) and len(shape(t)) == 4 for t in (q, k, v)):
        return None
    assert isinstance(q, fx.Node) and isinstance(k, fx.Node) and isinstance(v, fx.Node)
    picks = [u for u in node.users if op_name(u) == "getitem" and u.args[1] == 0]
    if not picks:
        return None
    facts = facts_of(node)
    d_k, d_v, padded = head_dims(q, v)
    scale = node.args[5] if len(node.args) > 5 else None
    return dict(
        output=picks[0], q=q, k=k, v=v, head_dim=d_k, v_head_dim=d_v,
        seq_len_q=shape(q)[-2], seq_len_kv=shape(k)[-2], implementation="flex",
        causal=facts is not None and facts.causal,
        scale=float(scale) if isinstance(scale, (int, float)) else None, masks=(),
        padded_head_dim=padded, form="flex",
        map_ops=facts.score_mod_ops or 0 if facts is not None else 0,
        gqa=shape(k)[-3] != shape(q)[-3],
        window=facts.window if facts is not None else None,
        visited_fraction=facts.visited_fraction if facts is not None else None,
        block_mask_read=facts.how if facts is not None else None,
    )
