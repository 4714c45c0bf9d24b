"""Query heads from routed experts: the k picked experts' outputs side by side are k·h_kv
heads (hand-made fixture; the transformers case is in tests/integration)."""

from __future__ import annotations

import torch
from fixtures.zoo_routed import DK, H_KV, B, D, H, N, RoutedQueryHeads

from mhaudit.api import audit


def test_routed_experts_side_by_side_are_the_query_heads() -> None:
    torch.manual_seed(0)
    report = audit(RoutedQueryHeads().eval(), (torch.randn(B, N, D),))
    (block,) = report.blocks
    lay = block.layout
    # One expert is H_KV·DK = 16 wide; 2 picked per token give 4 heads of 8 over 2 K/V heads.
    assert (lay.num_heads, lay.num_kv_heads, lay.head_dim, lay.d_model, lay.kind) == (
        H, H_KV, DK, D, "self")
    assert lay.k is not None and lay.k.params == D * H_KV * DK  # K's half of the fused kv
