"""Quantized layers hold packed weights, not parameters: counted, read as projections."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mhaudit.api import audit
from mhaudit.load.packed import packed_count, packed_note

B, N, D, H = 1, 5, 32, 4


class Textbook(nn.Module):
    """Separate q/k/v/o linears with biases around SDPA."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (p(x).view(b, n, H, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))


def _quantized() -> tuple[nn.Module, nn.Module]:
    """The float model and its dynamic-quantized copy (int8 weights, float biases)."""
    floats = Textbook().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            Textbook().eval(), {nn.Linear}, dtype=torch.qint8)
    return floats, quantized


@pytest.fixture(scope="module")
def models() -> tuple[nn.Module, nn.Module]:
    return _quantized()


def test_packed_weights_are_counted_as_parameters(models: tuple[nn.Module, nn.Module]) -> None:
    floats, quantized = models
    assert sum(p.numel() for p in quantized.parameters()) == 0  # torch lists none
    # 4·(32·32 + 32) = 4,224: what the float layers it replaced hold.
    assert packed_count(quantized) == sum(p.numel() for p in floats.parameters()) == 4224
    note = packed_note(quantized)
    assert note is not None and "qint8" in note and "4 quantized layer(s)" in note


def test_a_dynamic_quantized_block_reads_its_packed_projections(
        models: tuple[nn.Module, nn.Module]) -> None:
    floats, quantized = models
    x = torch.randn(B, N, D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = audit(quantized, (x,), verify=True)
    assert report.model.params_total == 4224
    (block,) = report.blocks
    assert (block.layout.num_heads, block.layout.num_kv_heads, block.layout.head_dim) == (H, H, 8)
    # Each projection: 32·32 weights + 32 biases = 1,056.
    assert (block.params.q, block.params.k, block.params.v, block.params.o) == (1056,) * 4
    assert not report.coverage.ops_without_formula
    # The same products as the float layers: FlopCounterMode on the float model.
    with FlopCounterMode(display=False) as counter:
        floats(x)
    linears = counter.get_flop_counts()["Global"][torch.ops.aten.addmm]
    flops = block.flops
    assert flops.q_proj + flops.k_proj + flops.v_proj + flops.o_proj == linears
    assert report.verification is not None
    (row, *_) = report.verification.rows
    assert row.ours == row.reference
