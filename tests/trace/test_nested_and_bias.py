"""Inputs torch's newer attention APIs make: nested (jagged) tensors are refused with one
line that names the limitation, and a ``CausalBias`` mask is read as the causal triangle
it stands for (lower-right: query i sees keys up to i + n_kv − n_q)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right

from mhaudit.api import audit
from mhaudit.cost.block import causal_pairs
from mhaudit.errors import TraceError

D, H = 32, 4


class Attn(nn.Module):
    def __init__(self, lower_right: bool = False) -> None:
        super().__init__()
        self.q, self.kv, self.o = nn.Linear(D, D), nn.Linear(D, 2 * D), nn.Linear(D, D)
        self.lower_right = lower_right

    def forward(self, x: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        q = self.q(x).unflatten(-1, (H, -1)).transpose(-2, -3)  # (b, h, n_q, d_k)
        k, v = (t.unflatten(-1, (H, -1)).transpose(-2, -3)
                for t in self.kv(mem).chunk(2, dim=-1))  # (b, h, n_kv, d_k)
        mask = causal_lower_right(q.shape[-2], k.shape[-2]) if self.lower_right else None
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(-2, -3).flatten(-2))


def test_a_lower_right_causal_bias_is_read_as_a_bottom_right_triangle() -> None:
    with torch.device("meta"):
        x, mem = torch.randn(1, 8, D), torch.randn(1, 24, D)
        (block,) = audit(Attn(lower_right=True), (x, mem)).blocks
    lay = block.layout
    assert (lay.causal, lay.causal_alignment, lay.seq_len_q, lay.seq_len_kv) == (
        True, "bottom-right", 8, 24)
    # query i sees keys 0 .. i + 16: Σ_{i<8} (17 + i) = 8·17 + 28 = 164 pairs per head
    assert causal_pairs(8, 24, 24 - 8) == 164


def test_nested_inputs_are_refused_with_the_limitation_named() -> None:
    jagged = torch.nested.nested_tensor([torch.randn(3, D), torch.randn(5, D)],
                                        layout=torch.jagged)
    with pytest.raises(TraceError, match="nested \\(jagged\\) tensors are not traced"):
        audit(Attn(), (jagged, jagged))
