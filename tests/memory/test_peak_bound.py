"""A peak from the graph's lifetimes says it is a lower bound and never falls below the
forward's own outputs."""

from __future__ import annotations

import torch
from torch import nn

from mhaudit.api import audit


class _CountsTokens(nn.Module):
    """Attention, then a wide head; the forward reads a value from the data (``.item()``),
    so it cannot run on fake tensors and the tracer falls back to a real CPU forward."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.head = nn.Linear(32, 4096)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = int((x[0, :, 0] > -1e9).sum().item())  # every token, read from the data
        y = self.attn(x[:, :keep], x[:, :keep], x[:, :keep], need_weights=False)[0]
        return self.head(y)


def test_a_peak_from_graph_lifetimes_is_a_lower_bound_at_least_the_outputs() -> None:
    torch.manual_seed(0)
    model = _CountsTokens().eval()
    x = torch.randn(2, 64, 32)
    report = audit(model, (x,), dtype="float32")
    with torch.no_grad():
        out = model(x)
    # the oracle: the real output's own bytes, 2·64·4096 floats · 4 B = 2,097,152 B
    assert report.totals.peak_activation_is_lower_bound
    assert report.totals.peak_activation_bytes is not None
    assert report.totals.peak_activation_bytes >= out.numel() * out.element_size()


def test_a_counted_peak_is_not_a_lower_bound() -> None:
    model = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0).eval()
    report = audit(model, (torch.randn(2, 16, 32),))
    assert not report.totals.peak_activation_is_lower_bound
