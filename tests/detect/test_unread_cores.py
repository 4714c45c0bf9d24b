"""No miss is silent: an op that can be an attention core and is in no block is listed in
``coverage.unread_cores`` with why, and the table's footer counts them."""

from __future__ import annotations

import torch
from torch import nn

from mhaudit.api import audit
from mhaudit.data import Report
from mhaudit.gate.budget import Budget, evaluate
from mhaudit.render.gate.outcome import verdict
from mhaudit.render.table import render_table

D, H, N = 32, 4, 8


class Attn(nn.Module):
    def __init__(self, weights_to_v: str) -> None:
        super().__init__()
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.router = nn.Linear(D, 4)
        self.weights_to_v = weights_to_v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, H, -1).permute(2, 0, 3, 1, 4)  # (b, h, n, d_k)
        p = (q @ k.transpose(-1, -2)).softmax(-1)  # (b, h, n, n)
        if self.weights_to_v == "cumsum":  # an op detection does not follow to V
            p = p.cumsum(-1)
        gate = self.router(x).softmax(-1)  # a softmax over a projection: not a core
        y = (p @ v).transpose(1, 2).reshape(b, n, D)
        return self.o(y) * gate.sum(-1, keepdim=True)


def _audit(weights_to_v: str) -> Report:
    with torch.device("meta"):
        return audit(Attn(weights_to_v), (torch.randn(1, N, D),))


def test_a_core_that_is_a_block_and_a_router_softmax_are_not_listed() -> None:
    report = _audit("direct")
    assert len(report.blocks) == 1
    assert report.coverage.unread_cores == ()


def test_a_softmax_of_qk_that_no_block_reads_is_listed_with_why() -> None:
    report = _audit("cumsum")
    assert report.blocks == ()
    (unread,) = report.coverage.unread_cores
    assert (unread.module, unread.op) == ("", "softmax")
    assert "product with V" in unread.why
    assert report.to_dict()["coverage"]["unread_cores"] == [
        {"module": "", "op": "softmax", "why": unread.why}]
    footer = " ".join(render_table(report).split())  # the footer wraps at the width
    assert "ops that can be attention but are in no block: 1 ((root) softmax" in footer
    assert verdict(evaluate(report, Budget())).endswith(
        "1 op(s) that can be attention in no block (coverage.unread_cores)")
