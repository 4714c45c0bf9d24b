"""Property: a detected block's analytic FLOPs equal the graph's FLOPs for the block's ops,
and the families of the whole-graph count sum to its total."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

import mhaudit


class Attention(nn.Module):
    """One attention block: Q/K/V/O linears (GQA when h_kv < h) and an SDPA or eager core."""

    def __init__(self, d: int, h: int, h_kv: int, d_k: int, eager: bool, causal: bool) -> None:
        super().__init__()
        self.h, self.h_kv, self.d_k, self.eager, self.causal = h, h_kv, d_k, eager, causal
        self.q = nn.Linear(d, h * d_k)
        self.k = nn.Linear(d, h_kv * d_k)
        self.v = nn.Linear(d, h_kv * d_k)
        self.o = nn.Linear(h * d_k, d)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.h, self.d_k).transpose(1, 2)  # (b, h, n, d_k)
        k = self.k(x).view(b, n, self.h_kv, self.d_k).transpose(1, 2)  # (b, h_kv, n, d_k)
        v = self.v(x).view(b, n, self.h_kv, self.d_k).transpose(1, 2)
        k = k.repeat_interleave(self.h // self.h_kv, 1)  # (b, h, n, d_k)
        v = v.repeat_interleave(self.h // self.h_kv, 1)
        if self.eager:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (b, h, n, n)
            if self.causal:
                removed = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(removed, float("-inf"))
            out = scores.softmax(-1) @ v  # (b, h, n, d_k)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.o(out.transpose(1, 2).reshape(b, n, self.h * self.d_k))  # type: ignore[no-any-return]


@settings(max_examples=12, deadline=None, phases=(Phase.explicit, Phase.generate))
@given(
    heads=st.sampled_from([1, 2, 4]),
    group=st.sampled_from([1, 2]),
    d_k=st.sampled_from([4, 8, 12]),
    d=st.sampled_from([16, 24]),
    n=st.integers(1, 9),
    b=st.integers(1, 2),
    eager=st.booleans(),
    causal=st.booleans(),
)
def test_block_flops_equal_the_graph(
    heads: int, group: int, d_k: int, d: int, n: int, b: int, eager: bool, causal: bool
) -> None:
    h, h_kv = heads * group, heads
    with torch.device("meta"):
        model = Attention(d, h, h_kv, d_k, eager, causal)
        x = torch.zeros(b, n, d)
    report = mhaudit.audit(model, (x,))
    (block,) = report.blocks
    families = report.totals.flops_by_family
    assert sum(families.values()) == report.totals.flops
    # the block's ops are its matmuls (projections, QKᵀ, PV) and its softmax; the graph
    # adds only elementwise work (the eager 1/sqrt(d_k) scale) that the block leaves out
    assert block.flops.total == families["matmul"] + families["softmax"]
    assert families["conv"] == families["norm"] == families["other"] == 0
