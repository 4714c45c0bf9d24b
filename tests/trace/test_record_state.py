"""The record runs a forward that moves its own modules (``module.to()``), as routers do."""

from __future__ import annotations

import torch
from torch import nn

from mhaudit.api import audit
from mhaudit.trace.export import trace

D, H, N = 32, 4, 8


class CastsItsRouter(nn.Module):
    """Self-attention beside a router that casts itself to its dtype in forward, as Switch
    Transformers' router does (``self.classifier = self.classifier.to(self.dtype)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(D, 2, bias=False)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.router = self.router.to(torch.float32)
        out, _ = self.attn(x, x, x, need_weights=False)
        return out + self.router(x).sum(-1, keepdim=True)


def test_a_forward_that_moves_a_module_is_recorded_on_the_first_rung() -> None:
    with torch.device("meta"):
        model, x = CastsItsRouter().eval(), torch.zeros(2, N, D)
    assert trace(model, (x,), {}).method == "dispatch-record"
    report = audit(model, (x,))
    (block,) = report.blocks
    assert (block.layout.num_heads, block.layout.d_model) == (H, D)
    assert report.totals.peak_activation_bytes > 0
    # The model keeps its own meta parameters after the audit.
    assert model.router.weight.is_meta and type(model.router.weight) is nn.Parameter
